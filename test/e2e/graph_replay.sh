#!/bin/bash
# CUDA graph replays (issue 25): each step from step 4 on launches a graph that holds one captured all_reduce (the
# fake libcudart.so.13 over the fake libcuda's graphs), and each launch is recorded as that all_reduce, with a
# sequence number of its own (origin "replay"); one eager all_reduce follows the last step. A clean run counts every
# replay; when rank 3 skips the launch of step 8, NCCL pairs the ops one off (rank 3's eager one with the others' last
# replay) and the others' eager one waits for it: every shim, the live collector and analyze after the end name rank
# 3 NOT_JOINED, and say that it launched the graph fewer times (its #13 a call where theirs is a replay).
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_TIMEOUT_SEC=60
unset NCCLWATCH_PROFILER  # the default: a replay must also take the communicator off NCCL's kernel events

# Clean: 4 eager all_reduces, the captured one (#5), 8 replays (#6-#13), the eager one (#14), every one completed.
touch "$GO"
launch_job 2 --fake-cuda --steps 12 --graph-step 4 --wait-gone "$GO"
wait_for 30 rank_settled 0 14 || fail "rank 0 did not complete its 14 ops: $(comm_counts 0)"
dump_rank 0 || fail "cannot read rank 0's file"
rm -f "$GO"
wait_for 30 ranks_gone || fail "the clean job did not end"
[ "$(json_get "$WORK/rank0.json" "len([r for r in d['records']['items'] if r['origin'] == 'replay'])")" = 8 ] ||
    fail "replay records: $(json_get "$WORK/rank0.json" "[(r['seq'], r['origin']) for r in d['records']['items']]")"
[ "$(json_get "$WORK/rank0.json" "[r['seq'] for r in d['records']['items'] if r['origin'] == 'replay']")" = \
    "[6, 7, 8, 9, 10, 11, 12, 13]" ] || fail "the replays are not numbered #6-#13"
[ "$(json_get "$WORK/rank0.json" "d['comms'][0]['coll_issued']")" = 14 ] || fail "rank 0 issued $(json_get \
    "$WORK/rank0.json" "d['comms'][0]['coll_issued']") collectives, want 14"
grep -q "STALL" "$WORK/launch.err" && fail "a clean run with graph replays reported a stall"
# Its switch to CUDA events changes nothing the user does (issue 43: a healthy job prints nothing).
if grep -q "^\[ncclwatch" "$WORK/launch.err"; then fail "the clean graph job printed: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"; fi

# Rank 3 skips the launch of step 8.
rm -rf "$NCCLWATCH_DIR"
start_live_serve
launch_job 4 --fake-cuda --steps 12 --graph-step 4 --graph-skip-rank 3 --graph-skip-step 8 --hold-ms 30000 \
    --teardown none
every_stall_led_by 3 NOT_JOINED "[3]"  # the three that wait (rank 3 is not stalled)
grep -q "NOT_JOINED: rank 3 (.*) never issued AllReduce #14 on communicator" "$WORK/launch.err" ||
    fail "the stderr report: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
grep -q "rank 3 launched a CUDA graph fewer times than ranks 0,1,2 before its #13" "$WORK/launch.err" ||
    fail "the report does not say rank 3 launched the graph fewer times: $(grep -m1 '\]       comm' "$WORK/launch.err")"
grep -q "rank 3's #13 is a call where ranks 0,1,2's #13 is a CUDA graph replay, and NCCL paired the two: in #[0-9]*..#13 rank 3 has 7 replays of it, rank 0 8 (a skipped replay)" \
    "$WORK/launch.err" || fail "the report lacks the evidence of the skipped replay"
wait_for 30 grep -q "NOT_JOINED" "$(live_txt)" || fail "the live collector did not report"
grep -m1 "NOT_JOINED" "$(live_txt)" | grep -q "rank 3 (.*) never issued AllReduce #14" ||
    fail "the live collector's verdict: $(head -3 "$(live_txt)")"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 3 (.*) never issued AllReduce #14 " ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"
grep -q "launched a CUDA graph fewer times" "$WORK/analysis.txt" || fail "analyze does not say rank 3 launched fewer"
echo "ok: 8 replays recorded as #6-#13; the skipped replay named (rank 3, NOT_JOINED) by every shim, live and after"

#!/bin/bash
# A signal the program keeps, then its real end (issue 45, point 5): rank 1's own handler takes a SIGTERM and trains
# on; 50 steps later it runs out of work and exits 0 (it stops at step 300 of 400: --exit-rank), while rank 0 waits in
# the all_reduce it never joins. On b3c73f4 the end recorded was the SIGTERM's, written before the handler ran and
# kept because the exit came within the 5 s the shim keeps it: "terminated by SIGTERM" (7 of 7 runs).
# RIGHT ANSWER: rank 1 exited 0, said so, with the SIGTERM its handler took noted beside it (format 1.13); never
# "terminated by SIGTERM". (An exit with a code within 5 s of the signal, its answer to it: test_causal.cpp.)
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 2 --absorb-term --steps 400 --step-ms 20 --exit-rank 1 --exit-step 300 --exit-code 0 --hold-ms 60000
wait_for 20 has_files '*.ncw' 2 || fail "no rank files"
f1=$(ls "$(job_dir)"/rank1-*.ncw)
# 50 steps (1 s) before its exit: the exit comes within the 5 s the SIGTERM's end is kept, and replaces it.
wait_for 20 issued_at_least "$f1" 250 || fail "rank 1 did not record 250 all_reduces"
kill -TERM "$(echo "$f1" | sed -n 's/.*-\([0-9]*\)\(\.[0-9a-f]*\)\{0,1\}\.ncw$/\1/p')"
ended() { "$NCW_COLLECTOR" dump --json "$f1" >"$WORK/r1.json" 2>/dev/null && grep -q '"end_kind": *"exit"' "$WORK/r1.json"; }
wait_for 20 ended || fail "rank 1 recorded no exit: $(grep -m3 end_ "$WORK/r1.json")"
[ "$(json_get "$WORK/r1.json" "d['header']['end_status']")" = 0 ] || fail "rank 1's end: $(grep -m3 end_ "$WORK/r1.json")"
[ "$(json_get "$WORK/r1.json" "d['header']['absorbed_signal']")" = 15 ] ||
    fail "the SIGTERM its handler took is not recorded: $(grep absorbed "$WORK/r1.json")"
found() {
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" 2>&1
    grep -q "rank 1 .*exited (exit code 0); its own handler had taken SIGTERM" "$WORK/analysis.txt"
}
wait_for 20 found || fail "analyze does not say rank 1 exited 0 after its handler took SIGTERM: $(cat "$WORK/analysis.txt")"
grep -q "terminated by SIGTERM" "$WORK/analysis.txt" && fail "analyze says terminated by SIGTERM: $(cat "$WORK/analysis.txt")"
stop_job
echo "ok: $(head -1 "$WORK/analysis.txt")"

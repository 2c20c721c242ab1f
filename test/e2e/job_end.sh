#!/bin/bash
# How the job ended, told after the end (issue 43). torch's NCCL watchdog (the test framework's thread named
# pt_nccl_watchdg, --torch-timeout-ms) ends ranks 1-3 whose all_reduce waits past the process group's timeout for rank
# 0, away at step 5; the launcher then ends rank 0. analyze of the folder leads with FAILED naming the watchdog, the
# op it timed out and rank 0 (never DEAD naming the ranks it ended, never "recovered"), with exit status 1:
#  - the wait still open when the watchdog ended them (the stall NOT_JOINED, which follows as its cause);
#  - the wait over (rank 0 came back while the watchdog waited for its Flight Recorder dump): the op that waited
#    longest on them, completed after torch's timeout had passed;
#  - TORCH_NCCL_ASYNC_ERROR_HANDLING=1: the watchdog aborts the communicators first.
# The surviving rank's final report (the launcher's SIGTERM) says FAILED too. A teardown that never returned
# (TEARDOWN_HANG) and was then killed stays the verdict after the end, printed once on the node's stderr. A mismatch
# NCCL completed moments before the job ended is said as it exits.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2

# torchrun's way: the first rank to fail ends the others (SIGTERM).
torch_job() {
    new_launch_logs
    rm -rf "$NCCLWATCH_DIR"
    LD_PRELOAD="$NCW_SHIM" "$FAKE_LAUNCH" --nproc 4 --kill-on-first-failure --timeout-sec 60 -- "$FAKE_RANK" \
        --sleep-rank 0 --sleep-step 5 --torch-timeout-ms 3000 "$@" >"$WORK/launch.out" 2>"$WORK/launch.err"
    JOB_RC=$?
    [ "$JOB_RC" != 0 ] || fail "the job the watchdog ended exited 0"
}

# analyze's verdict after the end: FAILED naming the watchdog, AllReduce #6 and rank 0; exit status 1. (Which of ranks
# 1-3 the watchdog ended before the launcher's SIGTERM reached them is a race.)
# failed_after_end WHAT HOW (HOW: a pattern of the summary)
failed_after_end() {
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
    local rc=$?
    [ $rc = 1 ] || fail "$1: analyze exited $rc after a failed job"
    head -1 "$WORK/analysis.txt" |
        grep -q "^VERDICT  torch's NCCL watchdog ended rank [123] (.*) after AllReduce #6 on communicator .* had waited [0-9.]* s for rank 0 (.*): the process group's timeout was shorter than that wait" ||
        fail "$1: analyze's first line: $(head -1 "$WORK/analysis.txt")"
    grep -q "FAILED  torch's NCCL watchdog ended ranks\? [123,]* ($2" "$WORK/analysis.txt" ||
        fail "$1: the summary: $(grep -m1 'FAILED  ' "$WORK/analysis.txt")"
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
    local lead="d['verdicts'][0]"
    [ "$(json_get "$WORK/analysis.json" "$lead['kind']")" = FAILED ] || fail "$1: JSON lead $(json_get "$WORK/analysis.json" "$lead")"
    [ "$(json_get "$WORK/analysis.json" "[c['global_rank'] for c in $lead['culprits']]")" = "[0]" ] ||
        fail "$1: culprits $(json_get "$WORK/analysis.json" "$lead['culprits']")"
    if grep -q "^  DEAD\|crashed with SIGABRT\|^OK" "$WORK/analysis.txt"; then fail "$1: $(grep -m1 "DEAD\|crashed\|^OK" "$WORK/analysis.txt")"; fi
}

torch_job --steps 10 --sleep-ms 8000
failed_after_end "the wait open" "SIGABRT raised in its thread pt_nccl_watchdg); the stall they were in: NOT_JOINED"
grep -q "NOT_JOINED: rank 0 (.*) never issued AllReduce #6" "$WORK/analysis.txt" ||
    fail "the stall does not follow: $(grep -m1 NOT_JOINED "$WORK/analysis.txt")"
grep -q "^\[ncclwatch r0\] FINAL (SIGTERM): FAILED: torch's NCCL watchdog ended" "$WORK/launch.err" ||
    fail "rank 0's final report: $(grep -m1 'FINAL' "$WORK/launch.err")"

# The watchdog waits 4 s for its dump, holding torch's work queue: rank 0 comes back at 5 s, the op completes.
torch_job --steps 400 --step-ms 20 --sleep-ms 5000 --torch-dump-ms 4000
failed_after_end "the wait over" "SIGABRT raised in its thread pt_nccl_watchdg); the longest wait on them: AllReduce #6 .* waited [0-9.]* s for rank 0, which issued it then: it completed, after torch's timeout had passed"

TORCH_NCCL_ASYNC_ERROR_HANDLING=1 torch_job --steps 10 --sleep-ms 8000
failed_after_end "the communicators aborted" "ncclCommAbort called in its thread pt_nccl_watchdg)"

# A teardown that never returns, the job then killed: TEARDOWN_HANG after the end, once on the node's stderr.
rm -rf "$NCCLWATCH_DIR"
FAKE_NCCL_DESTROY_HOLD_MS=60000 launch_job 4 --steps 5 --fake-cuda
wait_for 30 grep -q "TEARDOWN_HANG" "$WORK/launch.err" || fail "no TEARDOWN_HANG while it hung"
wait_for 10 has_files '*.report.json' 4 || fail "not every rank recorded the teardown hang"
stop_job
[ "$(grep -c "^\[ncclwatch r[0-9]\] TEARDOWN_HANG" "$WORK/launch.err")" = 1 ] ||
    fail "TEARDOWN_HANG printed $(grep -c "^\[ncclwatch r[0-9]\] TEARDOWN_HANG" "$WORK/launch.err") times on one node"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "analyze exited $rc after a teardown that never returned"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  ranks 0-3 (.*) have been inside the teardown of communicator" ||
    fail "after the end: $(head -1 "$WORK/analysis.txt")"
# A mismatch NCCL completes silently at the job's last step, the job exiting 0 within a second of it: said as the
# ranks exit, once on the node's stderr, and in every rank's report file.
rm -rf "$NCCLWATCH_DIR"
run_job 4 --steps 8 --mismatch-rank 2 --mismatch-step 6 --mismatch-kind dtype
[ "$JOB_RC" = 0 ] || fail "the job with a silent mismatch exited $JOB_RC"
[ "$(grep -c "^\[ncclwatch r[0-9]\] MISMATCH: rank 2 (.*) issued a different AllReduce than the other ranks at #7" "$WORK/launch.err")" = 1 ] ||
    fail "the silent mismatch at the end: $(grep -c '^\[ncclwatch r[0-9]\] MISMATCH' "$WORK/launch.err") reports on stderr"
for r in "$(job_dir)"/rank*-*.report.json; do
    [ "$(json_get "$r" "[e['type'] for e in d['events']]")" = "['mismatch']" ] || fail "$r: $(json_get "$r" "d['events']")"
done
echo "ok: torch's watchdog's end told as FAILED naming rank 0 (open, over, aborted), a killed teardown hang as TEARDOWN_HANG, a silent mismatch at the end said once"

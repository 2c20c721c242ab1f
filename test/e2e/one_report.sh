#!/bin/bash
# One report per node, every kind (issue 43): 8 ranks on one node share a stderr. For each verdict kind the node's
# stderr carries it once (one line starting with the kind) and at most 12 lines in all, while every rank that judged
# it records it in its own report file; so does a whole story (a stall, its dumps, then torch's watchdog ending the
# job: FAILED at the end); a healthy job, with the live collector in rank 0, prints nothing.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2

# Report files (of this job) holding an event of TYPE: reports_with TYPE
reports_with() {
    local n=0 r
    for r in "$(job_dir)"/rank*-*.report.json; do
        [ -f "$r" ] && grep -q "\"type\": *\"$1\"" "$r" && n=$((n + 1))
    done
    echo "$n"
}
# At least N report files hold an event of TYPE: reports_at_least TYPE N
reports_at_least() { [ "$(reports_with "$1")" -ge "$2" ]; }

# once KIND EVENT RANKS [fake_rank args...]: launches 8 ranks, waits until RANKS report files hold an EVENT, then
# counts the node's lines (RANKS: those that wait, and so judge it).
once() {
    local kind=$1 event=$2 ranks=$3
    shift 3
    rm -rf "$NCCLWATCH_DIR"
    launch_job 8 "$@"
    wait_for 40 grep -q "^\[ncclwatch r[0-9]\] $kind: " "$WORK/launch.err" || fail "$kind: not on stderr"
    wait_for 20 reports_at_least "$event" "$ranks" ||
        fail "$kind: $(reports_with "$event") report files hold a $event event, want $ranks"
    stop_job
    local said lines
    said=$(grep -c "^\[ncclwatch r[0-9]\] $kind: " "$WORK/launch.err")
    lines=$(grep -c "^\[ncclwatch" "$WORK/launch.err")
    [ "$said" = 1 ] || fail "$kind: said $said times on one node's stderr"
    [ "$lines" -le 12 ] || fail "$kind: $lines lines on one node's stderr (at most 12): $(grep '^\[ncclwatch' "$WORK/launch.err" | cut -c1-100)"
    echo "$kind: $lines lines"
}

once NOT_JOINED stall 7 --steps 20 --skip-rank 3 --skip-step 5 --hold-ms 30000
once MISMATCH mismatch 8 --steps 200 --step-ms 50 --mismatch-rank 3 --mismatch-step 5 --mismatch-kind dtype
once EXTRA_OP stall 1 --steps 20 --extra-rank 3 --extra-step 5 --hold-ms 30000
once DEAD stall 7 --steps 2000 --step-ms 10 --die-rank 3 --die-step 5
once DEADLOCK stall 8 --steps 20 --swap-rank 3 --swap-step 5
FAKE_NCCL_DESTROY_HOLD_MS=60000 once TEARDOWN_HANG teardown_hang 8 --steps 5 --fake-cuda

# The whole story of a job torch's watchdog ended, at 8 ranks: rank 0 away at step 5, the others' stall (NOT_JOINED)
# and their dumps, torch's NCCL watchdog ending ranks 1-7 past the process group's 3 s, the launcher's SIGTERM to rank
# 0 (FINAL: FAILED). Each verdict once, at most 12 lines in all.
rm -rf "$NCCLWATCH_DIR"
new_launch_logs
LD_PRELOAD="$NCW_SHIM" "$FAKE_LAUNCH" --nproc 8 --kill-on-first-failure --timeout-sec 60 -- "$FAKE_RANK" --steps 10 \
    --sleep-rank 0 --sleep-step 5 --sleep-ms 8000 --torch-timeout-ms 3000 >"$WORK/launch.out" 2>"$WORK/launch.err"
[ "$(grep -c "^\[ncclwatch r[0-9]\] NOT_JOINED: " "$WORK/launch.err")" = 1 ] || fail "the story: NOT_JOINED said $(grep -c "^\[ncclwatch r[0-9]\] NOT_JOINED: " "$WORK/launch.err") times"
[ "$(grep -c "^\[ncclwatch r[0-9]\] FINAL (SIGTERM): FAILED: " "$WORK/launch.err")" = 1 ] ||
    fail "the story: FAILED said $(grep -c "FINAL (SIGTERM): FAILED: " "$WORK/launch.err") times"
lines=$(grep -c "^\[ncclwatch" "$WORK/launch.err")
[ "$lines" -le 12 ] || fail "the story: $lines lines on one node's stderr (at most 12): $(grep '^\[ncclwatch' "$WORK/launch.err" | cut -c1-100)"
echo "NOT_JOINED then FAILED: $lines lines"

# Healthy, the live collector in rank 0 (the first to exit, its collector with it): nothing.
rm -rf "$NCCLWATCH_DIR"
NCCLWATCH_COLLECTOR=auto run_job 8 --steps 20
[ "$JOB_RC" = 0 ] || fail "the healthy job exited $JOB_RC"
if grep -q "^\[ncclwatch" "$WORK/launch.err"; then fail "a healthy job printed: $(grep -m3 '^\[ncclwatch' "$WORK/launch.err")"; fi
echo "ok: one report per node for NOT_JOINED, MISMATCH, EXTRA_OP, DEAD, DEADLOCK, TEARDOWN_HANG, and a stall then FAILED; a healthy job silent"

#!/bin/bash
# A signal the program keeps (issue 28, point 2): a training script that handles SIGTERM (a checkpoint on
# preemption) and goes on, then hangs for real. On 5405922 the shim took the SIGTERM as the end of the job and
# `analyze` afterwards judged the job as it stood then: "OK no hang", exit 0. Now the end is undone once the process
# has outlived the signal, each rank says so once, the hang that followed is reported (rank 1 skips the all_reduce of
# step 300, so rank 0 waits in the last one, #400: NOT_JOINED rank 1), and `analyze` after the end finds it (exit 1).
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 2 --absorb-term --steps 400 --step-ms 5 --skip-rank 1 --skip-step 300 --hold-ms 60000
wait_for 20 has_files '*.ncw' 2 || fail "no rank files"
f0=$(ls "$(job_dir)"/rank0-*.ncw)
wait_for 20 issued_at_least "$f0" 20 || fail "rank 0 did not record 20 all_reduces"
# The preemption notice: SIGTERM to every rank, which the script notes and trains on.
for f in "$(job_dir)"/rank*.ncw; do kill -TERM "$(echo "$f" | sed -n 's/.*-\([0-9]*\)\.ncw$/\1/p')"; done
said() { [ "$(grep -c "SIGTERM was taken by the program's own handler" "$WORK/launch.err")" -ge 2 ]; }
wait_for 30 said || fail "the ranks did not say the SIGTERM was not an end: $(grep -m5 ncclwatch "$WORK/launch.err")"
# The hang that followed, as the shim reports it once the ends are undone, and as `analyze` finds it.
hang_found() {
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" 2>&1
    [ $? = 1 ] && grep -q "rank 1 .* never issued AllReduce #400 " "$WORK/analysis.txt"
}
wait_for 30 hang_found || fail "analyze does not name rank 1 at #400 after the SIGTERM: $(head -3 "$WORK/analysis.txt")"
stop_job
# After the end (every rank SIGKILLed, as a user ends a hung job): still a hang, not "OK as it stood at the SIGTERM".
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis_end.txt"
rc=$?
[ $rc = 1 ] || fail "analyze after the end: exit $rc, want 1: $(head -3 "$WORK/analysis_end.txt")"
grep -q "^OK" "$WORK/analysis_end.txt" && fail "analyze after the end says OK: $(head -3 "$WORK/analysis_end.txt")"
echo "ok: a SIGTERM the program kept is not an end; the hang after it is found: $(head -1 "$WORK/analysis_end.txt")"

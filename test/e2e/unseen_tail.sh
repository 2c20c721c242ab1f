#!/bin/bash
# Issue 42 (lib_sync.sh): the last ops NCCL's profiler sends no Coll or KernelCh event for, with no later op of the
# communicator to prove them.
#
# A clean job whose last collective is withheld and which tears its communicator down at once (ncclCommDestroy, or
# ncclCommFinalize then ncclCommDestroy), before its stream is quiet long enough for a catch-up event: the teardown
# returned once NCCL completed the communicator's work, so at the end every collective is completed, exactly, as in
# the same job that waits before its teardown (sync_proofs.sh).
#
# The hang of sync_proofs.sh (rank 2 skips a collective, the others wait in #10, their GPUs stuck in it) where NCCL's
# profiler withholds its events from the op the ranks hang in as well as from the two before it (#8, #9, #10: a job
# whose all_reduces of that size all run as NCCL 2.28's symmetric kernels). Nothing shows whether a waiting GPU reached
# #10: its CollApi came, and no Coll or KernelCh event ever will, whether it runs or not. The right answer, with or
# without the ranks' synchronisations:
#   - the verdict is NOT_JOINED rank 2 at #10, as without withholding (rank 2 never issued it);
#   - no waiting rank's counts claim, exactly, that its GPU has not reached #10 (progress_exact with reached < 10),
#     and no output says its GPU has not reached an op (GPU_NOT_REACHED, "GPU busy with earlier work");
#   - with torch's waits (--torch-sync), #8 and #9 are proven complete (completed 9).
. "$(dirname "$0")/lib_sync.sh"

# judged WHAT: the checks above, once the waiting ranks have reported (or 10 s passed).
judged() {
    local r kind culprits got
    wait_for 10 has_files '*.report.json' 3 ||
        check_fail "$1: $(count_files '*.report.json') of the 3 waiting ranks reported"
    wait_for 5 grep -q "dumps written (stall)" "$WORK/launch.err"
    for r in "$(job_dir)"/rank[013]-*.report.json; do
        [ -f "$r" ] || continue
        kind=$(stall_lead "$r" kind)
        culprits=$(stall_lead "$r" culprits)
        [ "$kind $culprits" = "NOT_JOINED [2]" ] ||
            check_fail "$1: $(basename "$r"): lead $kind $culprits, want NOT_JOINED [2] (rank 2 never issued #10)"
    done
    got=$(analyze_lead)
    [ "$got" = "('NOT_JOINED', [2])" ] || check_fail "$1: analyze --json leads with $got, want NOT_JOINED [2]"
    for r in 0 1 3; do
        read -r issued reached completed exact _ <<<"$(counts $r)"
        [ "$issued" = 10 ] || check_fail "$1, rank $r: issued $issued, want 10"
        [ "$exact" = 1 ] && [ "$reached" -lt 10 ] &&
            check_fail "$1, rank $r: counts $(counts $r): exact, reached #$reached: a claim that its GPU has not" \
                "reached #10, which nothing shows"
    done
    no_output_says "$1" "GPU_NOT_REACHED"
    no_output_says "$1" "GPU busy with earlier work"
}

for how in destroy finalize; do
    rm -rf "$NCCLWATCH_DIR"
    FAKE_NCCL_PROFILER_WITHHOLD=20 run_job 2 --fake-cuda --steps 20 --teardown "$how"
    [ "$JOB_RC" = 0 ] || fail "teardown $how: the job exited $JOB_RC: $(tail -3 "$WORK/launch.err")"
    for r in 0 1; do
        [ "$(counts $r)" = "20 20 20 1 20 20" ] ||
            check_fail "teardown $how, rank $r: counts $(counts $r) at the end, want 20 20 20 exact, 20 of 20 ops"
        got=$(records $r 19 20)
        [ "$got" = "done/timed done/-" ] || check_fail "teardown $how, rank $r: #19 #20 are $got, want #20 done"
    done
done

hang 8,9,10 --torch-sync
judged "torch-sync"
for r in 0 1 3; do
    read -r issued reached completed exact _ <<<"$(counts $r)"
    [ "$completed" = 9 ] || check_fail "torch-sync, rank $r: completed $completed, want 9 (#8, #9 proven)"
done
stop_job

hang 8,9,10
judged "no synchronisation"
stop_job
checks_done "ok: the last ops withheld: completed at the teardown; in a hang NOT_JOINED rank 2, no claim on #10's reach"

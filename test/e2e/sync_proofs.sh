#!/bin/bash
# Issue 42, "every position proven" (lib_sync.sh): collectives NCCL's profiler names by their CollApi but sends no
# Coll or KernelCh event for are completed alone once proven, and the counts stay exact (no "lower bounds" in any
# output: stderr, report and dump files, `analyze`, `analyze --json`):
#   - a clean job, #10 and #20 (the last) of 20 withheld: #10 proven by the later ops' completions, #20 by its stream's
#     catch-up event (checked while the job still runs: before any teardown settles it); the same in groups (an
#     all_reduce, a send and a receive per launch);
#   - a hang (rank 2 skips a collective, the others wait in #10, their GPUs stuck in it) with #8 and #9 withheld, the
#     ranks waiting for each step's collective as torch does (fake_rank --torch-sync: cudaEventRecord on the
#     collective's stream, cudaStreamWaitEvent of a compute stream, cudaStreamSynchronize of the compute stream, as
#     `.item()`): those synchronisations prove #8 and #9 complete, the waiting ranks are exactly inside #10, and the
#     verdict is NOT_JOINED rank 2, as without withholding;
#   - the control: the same hang without the synchronisations reads as lower bounds, with the same verdict. Nothing
#     the shim takes as proof covers #8 and #9 there: the catch-up event after them sits behind the stuck #10, and the
#     start of #10's kernel (NCCL's KernelCh), which proves the ops of earlier launches that NCCL's events follow
#     (finish_earlier_plans), is not taken as proof of ops without events. Were it, #8 and #9 would be proven by it
#     (NCCL runs a communicator's kernels in order) and this control would have to withhold #10 too (unseen_tail.sh).
. "$(dirname "$0")/lib_sync.sh"

# ---- A clean job: #10 and #20 of 20 withheld ----
# clean WHAT OPS [fake_rank args...]: 2 ranks, 20 steps; the counts of every rank exact and complete (OPS ops in all)
# once the last op's stream is quiet, while the job still runs (before any teardown settles it), and at its end; #10
# and #20 done without NCCL's KernelCh times, their neighbours with them.
clean() {
    local what=$1 ops=$2 r got
    shift 2
    rm -rf "$NCCLWATCH_DIR"
    touch "$WORK/go"
    FAKE_NCCL_PROFILER_WITHHOLD=10,20 launch_job 2 --fake-cuda --steps 20 --wait-gone "$WORK/go" "$@"
    settled() { for r in 0 1; do [ "$(counts $r)" = "20 20 20 1 $ops $ops" ] || return 1; done; }
    wait_for 15 settled ||
        check_fail "$what, live: counts $(counts 0) / $(counts 1), want 20 20 20 exact, $ops of $ops ops"
    for r in 0 1; do
        got=$(records $r 9 10 11 19 20)
        [ "$got" = "done/timed done/- done/timed done/timed done/-" ] ||
            check_fail "$what, rank $r: #9 #10 #11 #19 #20 are $got, want #10, #20 done without NCCL's KernelCh times"
    done
    rm -f "$WORK/go"
    wait "$LAUNCH_PID"
    JOB_RC=$?
    LAUNCH_PID=""
    [ "$JOB_RC" = 0 ] || fail "$what: the job exited $JOB_RC: $(tail -3 "$WORK/launch.err")"
    for r in 0 1; do
        [ "$(counts $r)" = "20 20 20 1 $ops $ops" ] || check_fail "$what, at the end: rank $r counts $(counts $r)"
    done
    no_lower_bounds "$what"
    grep -q "^\[ncclwatch.*STALL" "$WORK/launch.err" && check_fail "$what: a stall was reported"
}
clean "clean" 20
echo "ok: clean, #10 and #20 of 20 withheld: all completed (#10 by the later ops, #20 by the catch-up event), exact"
# In groups (each step's all_reduce with a send and a receive, one launch; a later launch proves the withheld op).
clean "clean, groups" 60 --group
echo "ok: clean, in groups, #10 and #20 withheld: all completed, exact"

# ---- The hang, #8 and #9 withheld, torch's waits ----
hang 8,9 --torch-sync
waiters_say_rank2 "torch-sync"
for r in 0 1 3; do
    # Inside #10, proven: its GPU started it (NCCL's KernelCh) and #8, #9 are complete (the synchronisations).
    [ "$(counts $r)" = "10 10 9 1 10 9" ] ||
        check_fail "torch-sync, rank $r: counts $(counts $r), want issued 10, reached 10, completed 9, exact"
    got=$(records $r 7 8 9 10)
    [ "$got" = "done/timed done/- done/- open/-" ] || check_fail "torch-sync, rank $r: #7 #8 #9 #10 are $got"
done
[ "$(counts 2)" = "9 9 9 1 9 9" ] || check_fail "torch-sync, rank 2: counts $(counts 2), want 9 9 9, exact"
no_lower_bounds "torch-sync"
catch_up_possible && echo "note: #10 came 10 ms or more after #9 (a loaded machine): a catch-up event may have helped"
stop_job
echo "ok: hang, #8 and #9 withheld, torch's waits: NOT_JOINED rank 2; the waiting ranks exactly inside #10"

# ---- The control: the same hang, no synchronisation ----
hang 8,9
waiters_say_rank2 "control"
for r in 0 1 3; do counts $r >/dev/null || fail "control: cannot read rank $r's file"; done
if catch_up_possible; then
    echo "skipped: control: #10 came 10 ms or more after #9 (a loaded machine): a catch-up event could prove #8, #9"
else
    for r in 0 1 3; do
        read -r issued reached completed exact _ <<<"$(counts $r)"
        [ "$issued $completed $exact" = "10 7 0" ] ||
            check_fail "control, rank $r: counts $(counts $r), want completed 7 and not exact (#8, #9 unproven)"
    done
    grep -q "^\[ncclwatch r0\] .*completed #7 (lower bounds" "$WORK/launch.err" ||
        check_fail "control: the stall report does not call rank 0's counts lower bounds"
    echo "ok: control, no synchronisation: #8 and #9 unproven, lower bounds; the verdict is still NOT_JOINED rank 2"
fi
stop_job
checks_done "ok: sync proofs"

#!/bin/bash
# Issue 42 (lib_sync.sh): the other ways a program waits for a collective prove it complete too, and one that waits
# for something else proves nothing. The hang of sync_proofs.sh (rank 2 skips a collective; #8 and #9 withheld from
# NCCL's profiler events; the waiting GPUs stuck in #10), the ranks waiting after each step with fake_rank
# --torch-sync --sync-how:
#   - event: cudaEventRecord on the collective's stream, cudaEventSynchronize (a blocking work.wait());
#   - query: cudaEventRecord, then cudaEventQuery until it says done (torch's watchdog);
#   - device: cudaDeviceSynchronize (torch.cuda.synchronize());
# each proves #8 and #9: NOT_JOINED rank 2, the waiting ranks exactly inside #10, no "lower bounds" in any output.
#   - unrelated: cudaStreamSynchronize of a compute stream that waited on nothing proves nothing: #8 and #9 stay
#     unproven, the counts lower bounds (as with no synchronisation at all), the verdict the same.
. "$(dirname "$0")/lib_sync.sh"

for how in event query device; do
    hang 8,9 --torch-sync --sync-how "$how"
    waiters_say_rank2 "$how"
    for r in 0 1 3; do
        [ "$(counts $r)" = "10 10 9 1 10 9" ] ||
            check_fail "$how, rank $r: counts $(counts $r), want issued 10, reached 10, completed 9, exact"
    done
    [ "$(counts 2)" = "9 9 9 1 9 9" ] || check_fail "$how, rank 2: counts $(counts 2), want 9 9 9, exact"
    no_lower_bounds "$how"
    catch_up_possible && echo "note: $how: #10 came 10 ms or more after #9: a catch-up event may have helped"
    stop_job
    echo "ok: --sync-how $how proves #8 and #9: NOT_JOINED rank 2, exact counts"
done

hang 8,9 --torch-sync --sync-how unrelated
waiters_say_rank2 "unrelated"
for r in 0 1 3; do counts $r >/dev/null || fail "unrelated: cannot read rank $r's file"; done
if catch_up_possible; then
    echo "skipped: unrelated: #10 came 10 ms or more after #9 (a loaded machine): a catch-up event could prove #8, #9"
else
    for r in 0 1 3; do
        read -r issued reached completed exact _ <<<"$(counts $r)"
        [ "$issued $completed $exact" = "10 7 0" ] ||
            check_fail "unrelated, rank $r: counts $(counts $r), want completed 7 and not exact (#8, #9 unproven)"
    done
    echo "ok: --sync-how unrelated proves nothing: #8 and #9 unproven, lower bounds; NOT_JOINED rank 2"
fi
stop_job
checks_done "ok: sync proofs, every way of waiting"

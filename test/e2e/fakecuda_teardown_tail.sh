#!/bin/bash
# GPU sampling at teardown: a burst ends in ops without events of their own, then the communicator is destroyed (or
# finalized, then destroyed) at once and the process exits, long before the poller's catch-up (10 ms of quiet) could
# cover them. The teardown call settles them itself: the file left behind says every op completed, in the counters
# and in each record (PyTorch's destroy_process_group right after the last step; the 1-GPU run of test/gpu/run.sh
# found it). After an abort the ops never completed, and the file must not claim they did.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=30 NCCLWATCH_RING_SIZE=1024
for teardown in destroy finalize; do
    run_job 1 --fake-cuda --steps 3000 --count 1024 --teardown "$teardown"
    [ "$JOB_RC" = 0 ] || fail "$teardown: job failed (rc $JOB_RC)"
    dump_rank 0 || fail "$teardown: cannot read rank 0's file"
    [ "$(comm_counts 0)" = "[(3000, 3000)]" ] || fail "$teardown: not every op completed: $(comm_counts 0)"
    eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce'")"
    [ "$FOLLOWED" -ge 1 ] || fail "$teardown: no op followed (the test proves nothing)"
    [ "$NOT_DONE" = 0 ] || fail "$teardown: $NOT_DONE of the last $KEPT records have no completion time"
    echo "ok: $teardown: 3000 issued, 3000 completed ($FOLLOWED of the last $KEPT records followed, all stamped)"
    rm -rf "$(job_dir)"
done
# Abort: the stream is held, so nothing after the hold began completes; the file must keep them incomplete.
run_job 1 --fake-cuda --steps 3000 --count 1024 --cuda-hold-step 2990 --teardown abort
dump_rank 0 || fail "abort: cannot read rank 0's file"
done_n=$(json_get "$WORK/rank0.json" "d['comms'][0]['ops_completed']")
[ "$done_n" -lt 3000 ] || fail "abort: ops on a held stream counted as completed ($done_n)"
echo "ok: abort: $done_n of 3000 completed (the held ones stay incomplete)"

#!/bin/bash
# CUDA graph capture with GPU sampling: a burst of all_reduces ends in ops that follow a sampled one, and the stream
# goes under capture right after it (the fake libcuda flags it capturing) for 100 more all_reduces and 300 ms. The
# captured ops are marked and complete on return; no event of ours goes on the stream while it is capturing (an
# event recorded into a capture would join the user's graph), nor is any event queried from a thread in global
# capture mode; once the capture ends, a catch-up event completes the burst's followers.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=30 NCCLWATCH_DUMP_AT_EXIT=1 NCCLWATCH_RING_SIZE=2048
touch "$GO"
launch_job 1 --fake-cuda --steps 1100 --count 1024 --capture-step 1000 --capture-count 100 --capture-ms 300 \
    --wait-gone "$GO"
wait_for 60 rank_settled 0 1100 || fail "not every op completed"
finish_job
[ "$JOB_RC" = 0 ] || fail "job failed (rc $JOB_RC)"
dump_rank 0 || fail "cannot read rank 0's file"

eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce' and r['seq'] > 1000")"
[ "$KEPT" = 100 ] || fail "$KEPT records of captured ops, want 100"
[ "$CAPTURED" = 100 ] || fail "$CAPTURED of the 100 ops under capture are marked captured"
[ "$FOLLOWED" = 0 ] || fail "$FOLLOWED captured ops are marked sampled out"
[ "$NOT_DONE" = 0 ] || fail "$NOT_DONE captured ops have no completion time"
on_return=$(json_get "$WORK/rank0.json" \
    "len([r for r in d['records']['items'] if r['seq'] > 1000 and r['op'] == 'AllReduce' and r['done_ms'] == r['return_ms']])")
[ "$on_return" = 100 ] || fail "$on_return of the captured ops completed on return, want 100"
eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce' and r['seq'] <= 1000")"
[ "$CAPTURED" = 0 ] || fail "$CAPTURED ops before the capture are marked captured"
[ "$NOT_DONE" = 0 ] || fail "$NOT_DONE ops of the burst have no completion time"

[ "$(fake_stat 0 captured)" = 100 ] || fail "the fake libcuda saw $(fake_stat 0 captured) kernels captured, want 100"
[ "$(fake_stat 0 main_stream_records_while_capturing)" = 0 ] ||
    fail "$(fake_stat 0 main_stream_records_while_capturing) events recorded on the stream while it was capturing"
[ "$(fake_stat 0 records_while_capturing)" = 0 ] || fail "events recorded on a capturing stream"
[ "$(fake_stat 0 capture_violations)" = 0 ] ||
    fail "$(fake_stat 0 capture_violations) event queries from a thread in global capture mode during the capture"
checks=$(fake_stat 0 capture_checks_active)
catch_ups=$(json_get "$(ls "$(job_dir)"/rank0-*.dump.json)" "d['catch_up_events']")
last=$(json_get "$WORK/rank0.json" "[r for r in d['records']['items'] if r['op'] == 'AllReduce' and r['seq'] == 1000][0]")
eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce' and r['seq'] == 1000")"
if [ "$FOLLOWED" = 1 ]; then
    # #1000, the last op before the capture, followed: only a catch-up event could complete it, and the poller must
    # have found the stream capturing when it first tried (10 ms after #1000, well inside the 300 ms capture).
    [ "$checks" -ge 1 ] || fail "the poller never checked the capturing stream before a catch-up"
    [ "$catch_ups" -ge 1 ] || fail "#1000 followed, yet no catch-up event was recorded"
    "$PY" -c "import sys; r = $last; sys.exit(0 if r['done_ms'] - r['return_ms'] >= 300 else 1)" ||
        fail "#1000 completed before the capture ended: $last"
    echo "ok: 100 captured ops completed on return; the catch-up waited for the capture's end ($checks refusals, $catch_ups catch-ups); no event on the capturing stream"
else
    echo "ok: 100 captured ops completed on return; no event on the capturing stream (#1000 was sampled: no catch-up needed)"
fi

#!/bin/bash
# GPU sampling (NCCLWATCH_GPU_SAMPLE=auto) with the fake libcuda: a burst of all_reduces back-to-back on one stream
# completes in full, most of its ops follow a sampled one without events of their own, and the events recorded are a
# small fraction of the two per op that NCCLWATCH_GPU_SAMPLE=all records.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=30 NCCLWATCH_DUMP_AT_EXIT=1 NCCLWATCH_RING_SIZE=2048

# burst N auto|all [ENV=VALUE]: one rank, N all_reduces back-to-back; waits until all completed, ends the job;
# leaves the rank file's state in $WORK/rank0.json and the shim's exit dump in $WORK/exit.json.
burst() {
    local n=$1
    export NCCLWATCH_GPU_SAMPLE=$2
    rm -rf "$NCCLWATCH_DIR"
    touch "$GO"
    [ -n "${3:-}" ] && export "${3?}"
    launch_job 1 --fake-cuda --steps "$n" --count 1024 --wait-gone "$GO"
    [ -n "${3:-}" ] && unset "${3%%=*}"
    wait_for 60 rank_settled 0 "$n" || fail "$n ops: not every op completed: $(head -c 600 "$WORK/rank0.json" 2>/dev/null)"
    finish_job
    [ "$JOB_RC" = 0 ] || fail "$n ops: the job failed (rc $JOB_RC)"
    dump_rank 0 || fail "cannot read rank 0's file"
    cp "$(ls "$(job_dir)"/rank0-*.dump.json)" "$WORK/exit.json" || fail "no dump at exit"
    OPS=$(json_get "$WORK/rank0.json" "d['comms'][0]['ops_issued']")
    [ "$OPS" = "$n" ] || fail "$n ops: the rank file counts $OPS"
    RECORDS=$(fake_stat 0 event_records)
    [ -n "$RECORDS" ] || fail "$n ops: no counters from the fake libcuda"
    # The ring keeps the newest records (NCCLWATCH_RING_SIZE): the counts are of those.
    eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce'")"
    FALLBACKS=$(json_get "$WORK/exit.json" "d['event_fallbacks']")
    CATCH_UPS=$(json_get "$WORK/exit.json" "d['catch_up_events']")
    echo "$n ops, GPU_SAMPLE=$2${3:+ $3}: $RECORDS events recorded (fake libcuda), $FOLLOWED of $KEPT kept records sampled out," \
        "$UNTRACKED untracked, shim: $(json_get "$WORK/exit.json" "d['events_recorded']") events," \
        "$(json_get "$WORK/exit.json" "d['ops_without_events']") followers, $CATCH_UPS catch-ups, $FALLBACKS fallbacks"
    [ "$NOT_DONE" = 0 ] || fail "$n ops: $NOT_DONE records without a completion time"
}

# 20000 ops: at the fake's ~1 us per op the burst may outrun the poller's queue (fallbacks, counted as untracked);
# whatever the split, every op completes and the events stay far below 2 per op.
burst 20000 auto
[ "$RECORDS" -lt $((2 * 20000 / 10)) ] || fail "20000 ops: $RECORDS events recorded, want < 10 % of 40000"
[ "$FOLLOWED" -ge $((KEPT * 9 / 10)) ] || fail "20000 ops: only $FOLLOWED of $KEPT records sampled out"

# 5000 ops fit in the poller's queue (8192): no fallback at all, every follower completed by stream order.
burst 5000 auto
[ "$FALLBACKS" = 0 ] || fail "5000 ops: $FALLBACKS fallbacks, want 0"
[ "$UNTRACKED" = 0 ] || fail "5000 ops: $UNTRACKED untracked records, want 0"
[ "$RECORDS" -lt $((2 * 5000 / 10)) ] || fail "5000 ops: $RECORDS events recorded, want < 10 % of 10000"
[ "$FOLLOWED" -ge $((KEPT * 9 / 10)) ] || fail "5000 ops: only $FOLLOWED of $KEPT records sampled out"

# all: two events per op (reached, completed) and none sampled out. 500 ops fit in the event pool (1024 per
# device), so there is no fallback whatever the poller's pace, and exactly 1000 events.
burst 500 all
[ "$FOLLOWED" = 0 ] || fail "GPU_SAMPLE=all: $FOLLOWED records sampled out, want 0"
[ "$FALLBACKS" = 0 ] || fail "GPU_SAMPLE=all: $FALLBACKS fallbacks, want 0"
[ "$UNTRACKED" = 0 ] || fail "GPU_SAMPLE=all: $UNTRACKED untracked records, want 0"
[ "$RECORDS" = 1000 ] || fail "GPU_SAMPLE=all: $RECORDS events recorded, want 1000"
[ "$CATCH_UPS" = 0 ] || fail "GPU_SAMPLE=all: $CATCH_UPS catch-up events, want 0"
# The shim found its 12 driver functions through cuGetProcAddress (the 11 it needs, and cuStreamGetCaptureInfo).
[ "$(fake_stat 0 proc_address_found)" = 12 ] || fail "cuGetProcAddress served $(fake_stat 0 proc_address_found), want 12"

# A driver whose cuGetProcAddress finds nothing: the shim falls back to the versioned names, and tracks the same.
burst 500 all FAKE_CUDA_NO_PROC_ADDRESS=1
[ "$(fake_stat 0 proc_address_found)" = 0 ] || fail "FAKE_CUDA_NO_PROC_ADDRESS=1 did not take"
[ "$RECORDS" = 1000 ] && [ "$FOLLOWED" = 0 ] && [ "$FALLBACKS" = 0 ] ||
    fail "without cuGetProcAddress: $RECORDS events, $FOLLOWED sampled out, $FALLBACKS fallbacks"
echo "ok: sampling cut the events, every op completed; GPU_SAMPLE=all recorded 2 per op"

#!/bin/bash
# A process that never calls NCCL gets no thread and no file; NCCLWATCH_ENABLE=0 leaves no trace at all.
. "$(dirname "$0")/lib.sh"
threads=$(LD_PRELOAD="$NCW_SHIM" "$THREAD_PROBE")
[ "$threads" = 1 ] || fail "a process that never calls NCCL has $threads threads under the shim"
run_job 2 --never-nccl
[ "$JOB_RC" = 0 ] || fail "never-nccl job failed"
[ -e "$NCCLWATCH_DIR" ] && fail "a process that never calls NCCL created $NCCLWATCH_DIR"

NCCLWATCH_ENABLE=0 run_job 2 --steps 5 --split --group
[ "$JOB_RC" = 0 ] || fail "job failed with NCCLWATCH_ENABLE=0"
[ -e "$NCCLWATCH_DIR" ] && fail "NCCLWATCH_ENABLE=0 created $NCCLWATCH_DIR"
grep -q ncclwatch "$WORK/launch.err" && fail "NCCLWATCH_ENABLE=0 printed something"
echo "ok: no thread, no file"

#!/bin/bash
# The main job on its embedded default. On a machine with a GPU and PyTorch: torchrun of examples/ddp_train.py
# under the shim. Elsewhere: a simulated 4-rank job over the test NCCL on CPU in which rank 2 skips one all_reduce
# and then stays busy; the shim names it within the timeout, the live collector that rank 0 runs inside its shim
# (NCCLWATCH_COLLECTOR=auto) names it from the ranks' digests, and the collector reads the dump folder.
set -uo pipefail
cd "$(dirname "$0")/.."
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
    so=${NCCLWATCH_SO:-build/shim/libncclwatch.so}
    [ -f "$so" ] || bash scripts/setup.sh
    export NCCL_NVLS_ENABLE=0 NCCLWATCH_DIR=${NCCLWATCH_DIR:-/tmp/ncclwatch-demo}
    LD_PRELOAD=$PWD/$so torchrun --standalone --nproc_per_node="$(nvidia-smi -L | wc -l)" examples/ddp_train.py
    exit $?
fi

bash scripts/setup.sh || exit 1
export NCCLWATCH_DIR=${NCCLWATCH_DIR:-$(mktemp -d /tmp/ncclwatch-demo-XXXXXX)}
export NCCLWATCH_TIMEOUT_SEC=${NCCLWATCH_TIMEOUT_SEC:-3} FAKE_NCCL_TIMEOUT_SEC=120
export NCCLWATCH_COLLECTOR=${NCCLWATCH_COLLECTOR:-auto}
echo "demo: 4 ranks over the test NCCL; rank 2 skips the all_reduce of step 5, trains on, then stays busy outside NCCL."
echo "demo: NCCLWATCH_TIMEOUT_SEC=$NCCLWATCH_TIMEOUT_SEC, dumps in $NCCLWATCH_DIR"
echo
# The job runs in its own process group so that the demo can end it, as a user would end a hung job.
log=$NCCLWATCH_DIR/job.log
LD_PRELOAD=$PWD/build/shim/libncclwatch.so setsid build/test/fake_nccl/fake_launch --nproc 4 --timeout-sec 60 -- \
    build/test/fake_nccl/fake_rank --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000 >"$log" 2>&1 &
job=$!
trap 'kill -KILL -- -$job 2>/dev/null' EXIT
# Wait for the waiting ranks' reports (a condition, polled), then read the folder as a user would the next morning.
for _ in $(seq 600); do
    [ "$(ls "$NCCLWATCH_DIR"/*/*.report.json 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.05
done
sleep 0.5  # a demo, not a test: let the dumps the siblings asked for land before reading
echo "demo: what the shim wrote on stderr"
grep -v "dump written\|fake-nccl\|fake-framework" "$log"
echo
for _ in $(seq 200); do  # the live collector's report (NCCLWATCH_COLLECTOR=auto), a condition polled
    ls "$NCCLWATCH_DIR"/*/live-report.txt >/dev/null 2>&1 && break
    sleep 0.05
done
if ls "$NCCLWATCH_DIR"/*/live-report.txt >/dev/null 2>&1; then
    echo "demo: the live collector's report (rank 0's shim ran it: NCCLWATCH_COLLECTOR=auto)"
    head -3 "$NCCLWATCH_DIR"/*/live-report.txt
    echo
fi
echo "demo: ncclwatch-collector analyze $NCCLWATCH_DIR   (while the job hangs)"
build/collector/ncclwatch-collector analyze "$NCCLWATCH_DIR"
rc=$?
echo
echo "demo: ending the hung job"
{ kill -KILL -- -$job; wait $job; } 2>/dev/null
[ "$rc" = 1 ] && exit 0  # 1 = a hang was found, which is what this demo shows
exit "$rc"

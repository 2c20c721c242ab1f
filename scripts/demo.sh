#!/bin/bash
# The main job on its embedded default. On a machine with a GPU and PyTorch: torchrun of examples/ddp_train.py
# under the shim. Elsewhere: `ncclwatch demo` (python/ncclwatch/_demo.py) over a build of what it needs only: a
# simulated 4-rank job over the test NCCL on CPU in which rank 2 skips one all_reduce and then stays busy; the shim
# names it within the timeout, the live collector that rank 0 runs inside its shim (NCCLWATCH_COLLECTOR=auto) names
# it from the ranks' digests, and the collector reads the dump folder.
set -uo pipefail
cd "$(dirname "$0")/.."
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
    so=${NCCLWATCH_SO:-build-demo/shim/libncclwatch.so}
    [ -f "$so" ] || bash scripts/setup.sh --demo
    export NCCL_NVLS_ENABLE=0 NCCLWATCH_DIR=${NCCLWATCH_DIR:-/tmp/ncclwatch-demo}
    LD_PRELOAD=$PWD/$so torchrun --standalone --nproc_per_node="$(nvidia-smi -L | wc -l)" examples/ddp_train.py
    exit $?
fi

# Set-up for the demo only: the build's packages, then the shim, the collector and the test NCCL (not the tests).
bash scripts/setup.sh --demo || exit 1
# The wheel's `ncclwatch demo`, over this build's files.
PYTHONPATH=$PWD/python exec python3 -m ncclwatch._demo --so build-demo/shim/libncclwatch.so \
    --collector build-demo/collector/ncclwatch-collector --fake-dir build-demo/test/fake_nccl "$@"

#!/bin/bash
# The DDP and the FSDP step time with and without the shim at 4 ranks on ONE GPU (issue 26): examples/ddp_train.py and
# examples/fsdp_train.py --mode fsdp2, every rank on device 0 as its own NCCL host (examples/one_gpu.py:
# NCCL_HOSTID=fakehost<RANK>, NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0), each run a `python3 -m torch.distributed.run
# --standalone --nproc-per-node 4` launch, with LD_PRELOAD=<shim> NCCLWATCH_DIR=<temp> or without; ms/step of rank 0
# as the script times it after its warm-up. Time-boxed: pairs, ABBA, DDP and FSDP interleaved, while they fit in the
# budget (aim: 3 pairs of each). Prints one Markdown table per model (median of each arm, median of the pair ratios
# shim / none, their min..max, the pairs, "not resolved" when the spread exceeds the effect) and one of every run
# (a failed run with its exit and the tail of its stderr), also to $OUT/step_time.md; the raw per-run numbers to
# $OUT/step_time_raw.json, the launches' logs (no rank files) to $OUT/step_time_logs.tgz.
#   device tool: run(command="bash bench/step_time_gpu.sh", carry=[".carry"], kind="nvidia-h200")
#   bash bench/step_time_gpu.sh [SHIM_SO]      (default .carry/libncclwatch.so; about NCW_STEP_BUDGET_SEC, 240 s)
#
# "In one process where that is possible": not possible here. The shim is bound at load time through LD_PRELOAD:
# libtorch_cuda calls NCCL through its own linked symbols (libnccl.so.2 is its DT_NEEDED), which resolve to the shim's
# definitions when the process starts, and PyTorch has no second set of call sites that would go around the shim
# (bench/call_cost.cpp --ab can alternate in one process only because it owns its call sites); NCCLWATCH_ENABLE too is
# read once at start-up. So the arms are separate processes, alternated in pairs; each pair gives one ratio.
#
# Knobs: NCW_STEP_BUDGET_SEC (240: the whole script, tables included), NCW_STEP_RUN_SEC (8: timed seconds a run once
# the step time is known), NCW_STEP_MIN_PAIRS (3), NCW_STEP_MAX_PAIRS (12 a model), NCW_STEP_MODELS ("ddp fsdp"),
# NCW_STEP_DDP_ARGS / NCW_STEP_FSDP_ARGS (added to the scripts' arguments, e.g. "--hidden 512"), NCW_STEP_DDP_STEPS0
# (300) / NCW_STEP_FSDP_STEPS0 (60): the first pair's guess; NCW_STEP_RUN_TIMEOUT (60: a first run's timeout),
# NCW_PY (python3). NCW_STEP_FAKE=1: a dry run of the control flow and the tables without a GPU or torch (a stub
# stands in for torchrun and prints made-up timing lines; NCW_STEP_FAKE_FAIL="fsdp:shim:2:exit,ddp:none:1:noline"
# makes runs fail, ":hang" past their timeout; NCW_STEP_FAKE_SPEED scales its sleeps). bench/step_time_gpu.py says more.
set -u
T_START=$(date +%s)
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 2
SHIM=${1:-$REPO/.carry/libncclwatch.so}
BUDGET=${NCW_STEP_BUDGET_SEC:-240}
BUDGET=${BUDGET%.*}
OUTD=${OUT:-/tmp/ncw-step-time-out}
PY=${NCW_PY:-python3}
FAKE=${NCW_STEP_FAKE:-0}
mkdir -p "$OUTD"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
unset NCCL_PROFILER_PLUGIN  # the shim's default path: it points NCCL's profiler at itself

NCCL_LIB=""
if [ "$FAKE" = 0 ]; then
    [ -f "$SHIM" ] || { echo "step_time_gpu: no shim at $SHIM (carry .carry, or give its path)"; exit 2; }
    # torch's own NCCL (site-packages/nvidia/nccl/lib), never the system one: first on the library path of both arms;
    # step_time_gpu.py then checks, in each arm's environment, which libnccl.so torch has mapped.
    SP=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))') ||
        { echo "step_time_gpu: no torch for $PY"; exit 2; }
    NCCL_SO=$(find "$SP/nvidia" -name 'libnccl.so.2' 2>/dev/null | head -1)
    [ -n "$NCCL_SO" ] || { echo "step_time_gpu: no libnccl.so.2 under $SP/nvidia"; exit 2; }
    NCCL_LIB=$(dirname "$NCCL_SO")
    export LD_LIBRARY_PATH=$NCCL_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "torch's NCCL: $NCCL_LIB; system NCCL (must not be loaded): $(ldconfig -p 2>/dev/null |
        grep -o '/[^ ]*libnccl.so[^ ]*' | tr '\n' ' ')"
    echo "GPU(s): $(nvidia-smi -L 2>/dev/null | tr '\n' ' '); on it now: $(nvidia-smi \
        --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | tr '\n' ' ')"
    echo "shim: $SHIM ($(stat -c %s "$SHIM") bytes)"
else
    echo "NCW_STEP_FAKE=1: a dry run, no GPU and no torch; the numbers are made up"
fi

W=$(mktemp -d /tmp/ncw-step-time-XXXXXX)
# The helper stops starting runs when the next would end past the deadline; this guard only covers a helper that
# hangs itself (SIGTERM: it ends the launch in flight and still writes the tables).
timeout -k 10 $((BUDGET + 60)) "$PY" "$REPO/bench/step_time_gpu.py" --shim "$SHIM" --deadline $((T_START + BUDGET)) \
    --budget-sec "$BUDGET" --nccl-lib "$NCCL_LIB" --work "$W" --out-dir "$OUTD"
rc=$?
(cd "$W" && tar czf "$OUTD/step_time_logs.tgz" --exclude='*.ncw' . 2>/dev/null)
rm -rf "$W"
echo "step_time_gpu: exit $rc after $(($(date +%s) - T_START)) s; tables and raw numbers in $OUTD"
exit $rc

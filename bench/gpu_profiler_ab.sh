#!/bin/bash
# The profiler path, the event fallback and neither, side by side, in one device call (issue 13, "Measure"): CPU per
# intercepted call, the in-process 8 B A/B, NCCL's own arm (what NCCL's profiler and our callbacks cost), the bus
# bandwidth 1 MB .. 128 MB, per mode; one table (bench/gpu_profiler_ab.py says what each column is). Time-boxed: rounds
# of the five modes until the budget (default 75 s) would be passed, at least one.
#   device tool: run(command="bash bench/gpu_profiler_ab.sh", carry=[".carry"], kind="nvidia-h200")
#   bash bench/gpu_profiler_ab.sh [SHIM_SO] [CALL_COST_GPU] [BUDGET_SEC] [OUT_DIR] [ROWS_DIR]
# Defaults: .carry/libncclwatch.so, .carry/call_cost_gpu (built with --nranks/--sweep: bench/call_cost.cpp),
# .carry/ncclwatch-collector, $OUT (or /tmp/ncw-profiler-ab-out) for profiler_ab.md. NCW_AB_ROUNDS (3): rounds at
# most; NCW_AB_CPU_ONLY=1: only the CPU per call with its in-process A/B (about 4 s a mode: 10 rounds in 200 s);
# with NCW_AB_PAIR_CPU=1 also the CPU per call at 2 ranks (none, profiler, neither: about 15 s a mode more).
# Two GPUs or more: the all_reduce_perf -g 2 loop (call_cost --group 2 --ab) per mode as well.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
SHIM=${1:-$REPO/.carry/libncclwatch.so}
EXE=${2:-$REPO/.carry/call_cost_gpu}
BUDGET=${3:-75}
OUTD=${4:-${OUT:-/tmp/ncw-profiler-ab-out}}
ROWS=${5:-}
COLL=${NCW_COLLECTOR:-$(dirname "$SHIM")/ncclwatch-collector}
[ -x "$COLL" ] || COLL=$REPO/.carry/ncclwatch-collector
for x in "$SHIM" "$EXE"; do [ -e "$x" ] || { echo "gpu_profiler_ab: missing $x"; exit 2; }; done
if [ -z "${NCW_AB_LIBS_SET:-}" ]; then  # torch's NCCL and cudart, as for nccl-tests (never the system NCCL)
    SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    NCCL_LIB=$(dirname "$(find "$SP/nvidia" -name 'libnccl.so.2' | head -1)")
    CUDART_LIB=$(dirname "$(find "$SP/nvidia" -name 'libcudart.so.13' | head -1)")
    export LD_LIBRARY_PATH=$NCCL_LIB:$CUDART_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
unset NCCL_PROFILER_PLUGIN
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
W=$(mktemp -d /tmp/ncw-profiler-ab-XXXXXX)
mkdir -p "$OUTD"
timeout $((${BUDGET%.*} + 40)) python3 "$REPO/bench/gpu_profiler_ab.py" --shim "$SHIM" --call-cost "$EXE" \
    --collector "$COLL" --budget-sec "$BUDGET" --gpus "$NGPU" --work "$W" --out "$OUTD/profiler_ab.md" \
    ${ROWS:+--rows "$ROWS"} ${NCW_AB_ROUNDS:+--rounds "$NCW_AB_ROUNDS"} ${NCW_AB_CPU_ONLY:+--cpu-only} \
    ${NCW_AB_PAIR_CPU:+--pair-cpu}
rc=$?
(cd "$W" && tar czf "$OUTD/profiler_ab_raw.tgz" --exclude='*.ncw' . 2>/dev/null)
rm -rf "$W"
exit $rc

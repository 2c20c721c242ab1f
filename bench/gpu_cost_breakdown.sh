#!/bin/bash
# Where the shim's time goes in nccl-tests all_reduce_perf on the GPU: the same small-size run without the shim and
# with it in several settings (events off, "reached" events off, disabled), alternated ROUNDS times; prints the median
# out-of-place time per size and setting. Run on the GPU machine from the repo root with the carried build:
#   device tool: run(command="bash bench/gpu_cost_breakdown.sh", carry=[".carry"], kind="nvidia-h200-x2")
#   bash bench/gpu_cost_breakdown.sh [GPUS] [ROUNDS]
set -u
G=${1:-2}
ROUNDS=${2:-3}
export NCCL_NVLS_ENABLE=0
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
NCCL_LIB=$(dirname "$(find "$SP/nvidia" -name 'libnccl.so.2' | head -1)")
CUDART_LIB=$(dirname "$(find "$SP/nvidia" -name 'libcudart.so.13' | head -1)")
export LD_LIBRARY_PATH=$NCCL_LIB:$CUDART_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SHIM=$PWD/.carry/libncclwatch.so
ARP=$PWD/.carry/all_reduce_perf
W=$(mktemp -d /tmp/ncw-breakdown-XXXXXX)
export NCCLWATCH_DIR=$W/ncw
settings=(without default no_reached no_events disabled)
run_one() {
    local s=$1 out=$2
    case $s in
        without) timeout 60 "$ARP" -b 8 -e 1M -f 4 -g "$G" -n 200 -w 20 >"$out" 2>&1 ;;
        default) LD_PRELOAD=$SHIM timeout 60 "$ARP" -b 8 -e 1M -f 4 -g "$G" -n 200 -w 20 >"$out" 2>&1 ;;
        no_reached) NCCLWATCH_GPU_REACHED=0 LD_PRELOAD=$SHIM timeout 60 "$ARP" -b 8 -e 1M -f 4 -g "$G" -n 200 -w 20 >"$out" 2>&1 ;;
        no_events) NCCLWATCH_GPU_EVENTS=0 LD_PRELOAD=$SHIM timeout 60 "$ARP" -b 8 -e 1M -f 4 -g "$G" -n 200 -w 20 >"$out" 2>&1 ;;
        disabled) NCCLWATCH_ENABLE=0 LD_PRELOAD=$SHIM timeout 60 "$ARP" -b 8 -e 1M -f 4 -g "$G" -n 200 -w 20 >"$out" 2>&1 ;;
    esac
}
for r in $(seq "$ROUNDS"); do
    for s in "${settings[@]}"; do run_one "$s" "$W/$s.$r.txt"; done
done
python3 - "$W" "$ROUNDS" "${settings[@]}" <<'PY'
import sys, statistics, re
w, rounds, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {}
for s in settings:
    for r in range(1, rounds + 1):
        for line in open(f"{w}/{s}.{r}.txt", errors="replace"):
            f = line.split()
            if len(f) > 6 and f[0].isdigit() and re.match(r"^[0-9.]+$", f[5]):
                data.setdefault((s, int(f[0])), []).append(float(f[5]))
sizes = sorted({k[1] for k in data})
print("median out-of-place time (us) over %d rounds, all_reduce_perf -g N" % rounds)
print("%10s" % "size" + "".join("%12s" % s for s in settings))
for z in sizes:
    print("%10d" % z + "".join("%12.2f" % statistics.median(data.get((s, z), [0])) for s in settings))
PY

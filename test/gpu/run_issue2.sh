#!/bin/bash
# The shim inside torch and NCCL on one GPU (device machine). Takes a carried build in .carry/ (libncclwatch.so,
# ncclwatch-collector, call_cost_gpu, clock_cost), writes a log and the evidence to $OUT.
# Here: meson setup build-release -Dbuildtype=release -Dtests=false && ninja -C build-release &&
#   mkdir -p .carry && cp build-release/shim/libncclwatch.so build-release/collector/ncclwatch-collector \
#   build-release/bench/call_cost_gpu build-release/bench/clock_cost .carry/
# Device tool: run(command="bash test/gpu/run_issue2.sh 2>&1 | tee $OUT/run.log", carry=[".carry"])
set -u
OUT=${OUT:-/tmp/ncw-gpu-out}
mkdir -p "$OUT"
C=$PWD/.carry
SHIM=$C/libncclwatch.so
COLL=$C/ncclwatch-collector
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W=/tmp/ncw-gpu
rm -rf "$W"
mkdir -p "$W"
PY=python3
SP=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
NCCL_LIB=$(dirname "$(find "$SP/nvidia" -name 'libnccl.so.2' | head -1)")
CUDART_LIB=$(dirname "$(find "$SP/nvidia" -name 'libcudart.so.13' | head -1)")
section() { echo; echo "=== $*"; }

section environment
nvidia-smi -L
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
echo "torch's NCCL: $NCCL_LIB; cudart: $CUDART_LIB"
ldconfig -p | grep libnccl || true
echo "shim DT_NEEDED: $(readelf -d "$SHIM" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
LD_PRELOAD=$SHIM $PY -c 'import torch; print("import torch under the shim: ok")'

section "DDP under the shim, 1 GPU (300 steps, a subgroup, a CUDA graph)"
export NCCLWATCH_TIMEOUT_SEC=10
NCCLWATCH_DIR=$W/ddp LD_PRELOAD=$SHIM torchrun --standalone --nproc_per_node=1 examples/ddp_train.py \
    --steps 300 --subgroup --graph 2>&1 | tee "$W/ddp.log" | grep -v "^\[ncclwatch.*dump written"
echo "reports written: $(ls "$W"/ddp/*/*.report.json 2>/dev/null | wc -l)"
f=$(ls "$W"/ddp/*/*.ncw | head -1)
$COLL dump --json "$f" >"$W/ddp_dump.json"
$COLL analyze "$W/ddp" >"$W/ddp_analysis.txt"; echo "collector analyze exit: $? (0 = nothing found)"
$PY - "$W/ddp_dump.json" <<'PYEOF'
import json, sys, collections
d = json.load(open(sys.argv[1]))
recs = d["records"]["items"]
ops = collections.Counter(r["op"] for r in recs)
print("records by op:", dict(ops))
for op in ("AllReduce", "Broadcast", "AllGather"):
    rs = [r for r in recs if r["op"] == op]
    if not rs: continue
    done = sum(r["done_ms"] is not None for r in rs)
    reached = sum(r["reached_ms"] is not None for r in rs)
    captured = sum("captured" in r["flags"] for r in rs)
    untracked = sum("untracked" in r["flags"] for r in rs)
    print(f"{op}: {len(rs)} issued, {reached} GPU-reached, {done} GPU-completed, {captured} captured, {untracked} untracked")
    gpu = [r["done_ms"] - r["return_ms"] for r in rs if r["done_ms"] is not None and r["return_ms"] is not None]
    if gpu:
        gpu.sort(); print(f"  return->GPU-done median {gpu[len(gpu)//2]:.3f} ms")
for c in d["comms"]:
    print(f"comm {c['comm_id']} rank {c['rank']}/{c['nranks']} dev {c['cuda_dev']} pci {c['pci_bus_id']} gpu_tracking {c['gpu_tracking']} issued {c['coll_issued']} reached {c['coll_reached']} completed {c['coll_completed']} state {c['state']}")
PYEOF
grep "recording to" "$W/ddp.log" | head -2

section "clock cost on this machine"
grep -o -w 'constant_tsc\|nonstop_tsc' /proc/cpuinfo | sort | uniq -c
cat /sys/devices/system/clocksource/clocksource0/current_clocksource
"$C/clock_cost"

section "NCCLWATCH_BACKTRACE=1 and a dump at exit (50 steps)"
NCCLWATCH_BACKTRACE=1 NCCLWATCH_DUMP_AT_EXIT=1 NCCLWATCH_DIR=$W/bt LD_PRELOAD=$SHIM torchrun --standalone \
    --nproc_per_node=1 examples/ddp_train.py --steps 50 2>&1 | grep -v "dump written" | tail -3
d=$(ls "$W"/bt/*/*.dump.json | head -1)
$PY -c "
import json; d=json.load(open('$d'))
rs=[r for r in d['records'] if r['op']=='AllReduce' and r.get('backtrace')]
print(len(rs), 'AllReduce records with a stack; the last one:')
for f in rs[-1]['backtrace'][:8]: print('   ', f)"

section "DDP step time, alternated without / with the shim (9 pairs, 500 steps)"
for i in 1 2 3 4 5 6 7 8 9; do
    torchrun --standalone --nproc_per_node=1 examples/ddp_train.py --steps 500 2>&1 | grep "steps in" |
        sed 's/^/without: /' | tee -a "$W/steps.txt"
    NCCLWATCH_DIR=$W/steps LD_PRELOAD=$SHIM torchrun --standalone --nproc_per_node=1 examples/ddp_train.py --steps 500 \
        2>&1 | grep "steps in" | sed 's/^/with:    /' | tee -a "$W/steps.txt"
done
$PY - "$W/steps.txt" <<'PYEOF'
import re, sys, statistics
w, wo = [], []
for line in open(sys.argv[1]):
    ms = float(re.search(r"\(([0-9.]+) ms/step\)", line).group(1))
    (w if line.startswith("with:") else wo).append(ms)
ratios = [a / b for a, b in zip(w, wo)]
print(f"median ms/step without {statistics.median(wo):.4f}, with {statistics.median(w):.4f}; "
      f"median of pair ratios {statistics.median(ratios):.4f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)})")
PYEOF

section "GPU busy for 8 s before an all_reduce (timeout 3 s): GPU_NOT_REACHED, then recovered"
NCCLWATCH_TIMEOUT_SEC=3 NCCLWATCH_DIR=$W/busy LD_PRELOAD=$SHIM torchrun --standalone --nproc_per_node=1 \
    examples/ddp_train.py --steps 40 --gpu-busy-ms 8000 --busy-step 20 2>&1 | grep -v "dump written" | tail -25
r=$(ls "$W"/busy/*/*.report.json 2>/dev/null | head -1)
[ -n "$r" ] && $PY -c "
import json,sys; d=json.load(open('$r'))
for e in d['events']:
    print(e['type'], e.get('stalled_for_s'), [ (v['kind'], v['culprits'], v['seq']) for v in e.get('verdicts', [])])"

section "call cost on the GPU: without, with the shim (2 events/op), 1 event/op, no events"
LD_LIBRARY_PATH=$NCCL_LIB:$CUDART_LIB bash bench/run_call_cost.sh "$SHIM" "$C/call_cost_gpu" 5 gpu

section "copies"
cp "$W/ddp.log" "$W/ddp_analysis.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/evidence.tgz" -C "$W" . 2>/dev/null
ls -la "$OUT"

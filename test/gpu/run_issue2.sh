#!/bin/bash
# The shim inside torch and NCCL on one GPU (device machine). Takes a carried build in .carry/ (libncclwatch.so,
# ncclwatch-collector, call_cost_gpu), writes a log and the evidence to $OUT.
#   bash test/gpu/run_issue2.sh
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

section "DDP step time, alternated without / with the shim (3 pairs, 500 steps)"
for i in 1 2 3; do
    torchrun --standalone --nproc_per_node=1 examples/ddp_train.py --steps 500 2>&1 | grep "steps in" | sed 's/^/without: /'
    NCCLWATCH_DIR=$W/steps LD_PRELOAD=$SHIM torchrun --standalone --nproc_per_node=1 examples/ddp_train.py --steps 500 \
        2>&1 | grep "steps in" | sed 's/^/with:    /'
done

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

#!/bin/bash
# Two GPUs (device kind nvidia-h200-x2), the carried build in .carry/: the skip and size-mismatch scenarios of
# examples/hang_scenarios.py under the shim, and a clean run; prints each rank's verdicts.
#   run(command="bash test/gpu/run_two_gpu_smoke.sh 2>&1 | tee $OUT/run.log", carry=[".carry"], kind="nvidia-h200-x2")
set -u
OUT=${OUT:-/tmp/ncw-gpu-out}
mkdir -p "$OUT"
SHIM=$PWD/.carry/libncclwatch.so
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCLWATCH_TIMEOUT_SEC=5
W=/tmp/ncw-2gpu
rm -rf "$W"
nvidia-smi -L
for s in skip size_mismatch clean; do
    echo
    echo "=== $s"
    linger=20
    [ "$s" = clean ] && linger=0
    start=$(date +%s.%N)
    NCCLWATCH_DIR=$W/$s LD_PRELOAD=$SHIM timeout 90 torchrun --standalone --nproc_per_node=2 \
        examples/hang_scenarios.py --scenario "$s" --linger-sec $linger 2>&1 | grep -v "dump written" | tail -30
    echo "wall $(echo "$(date +%s.%N) - $start" | awk '{print $1 - $3}') s"
    python3 - "$W/$s" <<'PYEOF'
import glob, json, os, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "*", "*.report.json")))
print(f"{len(files)} report file(s)")
for f in files:
    d = json.load(open(f))
    for e in d["events"]:
        vs = [(v["kind"], v["culprits"], v["seq"], v["summary"]) for v in e.get("verdicts", [])]
        print(f"  rank {d['process']['global_rank']}: {e['type']} after {e.get('stalled_for_s', 0):.1f} s: {vs}")
PYEOF
done
tar czf "$OUT/two_gpu_evidence.tgz" -C "$W" . 2>/dev/null

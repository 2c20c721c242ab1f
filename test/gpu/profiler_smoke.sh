#!/bin/bash
# One short check of the shim as NCCL's profiler plugin on the GPU machine (about a minute): a 4-rank job on one GPU
# in which the last rank skips an all_reduce; prints which profiler plugin NCCL loaded, the verdict, and per rank file
# the communicators' counts with their source (nccl-profiler expected) and how many records carry GPU times.
#   device tool: run(command="bash test/gpu/profiler_smoke.sh", carry=[".carry"], kind="nvidia-h200", timeout_s=300)
set -u
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
W=/tmp/ncw-profsmoke
rm -rf "$W"
mkdir -p "$W"
export NCCLWATCH_DIR=$W/dumps NCCLWATCH_TIMEOUT_SEC=8 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV
LD_PRELOAD=$PWD/.carry/libncclwatch.so timeout 60 python3 -m torch.distributed.run --standalone --nproc_per_node=4 \
    examples/hang_scenarios.py --scenario skip --one-gpu >"$W/job.log" 2>&1
echo "job exit $?"
grep -E "PROFILER|Profiler|profiler" "$W/job.log" | sort | uniq -c | head -8
grep -E "^\[ncclwatch.*(STALL|NOT_JOINED|STUCK|GPU_NOT|error|warn)" "$W/job.log" | cut -c1-300 | head -12
for f in "$W"/dumps/*/rank*.ncw; do
    .carry/ncclwatch-collector dump --json "$f" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for c in d["comms"]:
    if c["coll_issued"]:
        print(sys.argv[1].split("/")[-1][:14], "issued", c["coll_issued"], "reached", c["coll_reached"], "completed",
              c["coll_completed"], c["gpu_source"], "exact" if c["progress_exact"] else "bounds",
              "clock +-%d us" % (c["gpu_clock_uncertainty_ns"] // 1000))
r = d["records"]["items"]
t = [x for x in r if "gpu_timed" in x["flags"]]
print("   records", len(r), "gpu_timed", len(t), "median GPU ms %.3f" % sorted(x["done_ms"] - x["reached_ms"] for x in t)[len(t) // 2] if t else "")
' "$f"
done
.carry/ncclwatch-collector analyze "$W"/dumps/*/ | head -12

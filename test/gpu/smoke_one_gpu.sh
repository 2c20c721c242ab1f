#!/bin/bash
# A quick look, before the full run (test/gpu/run.sh), that every script of the one-GPU mode starts and ends on
# this machine: a 4-rank skip, the 8-rank grid (clean), FSDP + TP (clean, 8 s), two nodes of 2 ranks. About 2 minutes.
#   device tool: run(command="bash test/gpu/smoke_one_gpu.sh", carry=[".carry"], kind="nvidia-h200")
set -u
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
S=$PWD/.carry/libncclwatch.so
C=$PWD/.carry/ncclwatch-collector
G=test/gpu
W=/tmp/ncw-smoke
OUT=${OUT:-/tmp/ncw-smoke-out}
rm -rf "$W"
mkdir -p "$W" "$OUT"
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
run() { python3 $G/run_scenario.py --variant shim --shim "$S" --collector "$C" --timeout 10 --one-gpu "$@"; }
run --scenario skip --work $W/skip/shim --nproc 4 --max-sec 70 >$W/skip.log 2>&1 &
run --scenario grid_clean --work $W/grid_clean/shim --nproc 8 --script examples/grid_2x4.py \
    --script-args "--scenario clean" --live auto --end-after-report -1 --max-sec 90 >$W/grid.log 2>&1 &
run --scenario fsdp_tp_clean --work $W/fsdp_tp_clean/shim --nproc 4 --script examples/fsdp_train.py \
    --script-args "--mode fsdp_tp --train-sec 8" --end-after-report -1 --max-sec 100 >$W/fsdp.log 2>&1 &
python3 $G/run_two_nodes.py --work $W/two --shim "$S" --collector "$C" --rows $W/rows --nproc-per-node 2 \
    --timeout 10 --one-gpu >$W/two.log 2>&1 &
wait
for f in $W/*.log; do echo "== $f"; tail -4 "$f"; done
for d in skip grid_clean fsdp_tp_clean; do echo "== $d job"; grep -v "^\[ncclwatch" $W/$d/shim/job.log | tail -12; done
echo "== two nodes"; tail -n 8 $W/two/nodeA.log $W/two/nodeB.log
python3 $G/scenario_table.py $W --nproc 4 --one-gpu --rows-dir $W/rows
python3 $G/grid_table.py $W --rows-dir $W/rows
python3 $G/framework_table.py $W --rows-dir $W/rows
python3 $G/print_table.py $W/rows --out "$OUT/smoke-table.md" --max-cell 60
tar czf "$OUT/smoke.tgz" -C /tmp --exclude='*.ncw' ncw-smoke 2>/dev/null
ls -la "$OUT"

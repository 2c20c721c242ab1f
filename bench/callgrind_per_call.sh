#!/bin/bash
# The shim's own instructions per intercepted ncclAllReduce, counted by callgrind: a number that does not move with
# the machine's load (the wall clock on a shared VM does, by a factor of two). Runs bench/call_cost.cpp's fake loop
# (the fake NCCL, with the fake libcuda.so.1 preloaded so that GPU tracking is on) under callgrind, collecting only
# inside the shim's ncclAllReduce, ncclGroupStart and ncclGroupEnd: entering the real one inside each toggles the
# collection off, so NCCL's own work is left out. Divided by the ops counted (the loop's warm-up is timed, so their
# number varies); with NCW_CALL_COST_ARGS="--group 2", a group's cost is shared by its two ops.
#   bench/callgrind_per_call.sh BUILD_DIR SHIM_SO [ENV=VALUE...]
#   e.g. bench/callgrind_per_call.sh build build/shim/libncclwatch.so FAKE_CUDA_HOLD_ALL=1
# Without SHIM_SO ("") the count is the fake NCCL's own instructions per call.
set -u
build=$1
shim=$2
shift 2
out=$(mktemp /tmp/ncw-callgrind-XXXXXX)
export NCCLWATCH_DIR=$(mktemp -d /tmp/ncw-bench-XXXXXX)
trap 'rm -rf "$out" "$NCCLWATCH_DIR"' EXIT
read -r -a more <<<"${NCW_CALL_COST_ARGS:-}"
env "$@" LD_PRELOAD="$build/test/fake_cuda/libcuda.so.1 $shim" valgrind --tool=callgrind --toggle-collect=ncclAllReduce \
    --toggle-collect=ncclGroupStart --toggle-collect=ncclGroupEnd --callgrind-out-file="$out" \
    "$build/bench/call_cost_fake" --batches 10 --calls 2000 "${more[@]}" >/dev/null 2>&1 ||
    { echo "callgrind failed" >&2; exit 1; }
python3 - "$out" <<'EOF'
import re, sys
names, calls, total, callee = {}, 0, 0, None
for line in open(sys.argv[1]):
    m = re.match(r'c?fn=\((\d+)\)(?: (.*))?', line)
    if m:
        if m.group(2):
            names[m.group(1)] = m.group(2).strip()
        if line.startswith('cfn='):
            callee = names.get(m.group(1), '')
        continue
    # Calls of a function each intercepted call makes once, where collecting: the shim's record, or without the shim
    # the fake NCCL's enqueue of the op's "kernel".
    if line.startswith('calls=') and callee and re.search(r'record_issue\(|^fakecuda_enqueue$', callee):
        calls += int(line.split('=')[1].split()[0])
    if line.startswith(('summary:', 'totals:')):
        total = int(line.split()[1])
if not calls:
    sys.exit('no calls counted')
print(f'{total / calls:.0f} instructions per op ({calls} ops)')
EOF

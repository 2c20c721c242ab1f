#!/bin/bash
# The call-cost benchmark on the fake NCCL with the fake libcuda.so.1 preloaded (so that the shim tracks GPU
# completion), alternated over shim builds and completion variants, N rounds, pinned to one core with the shim's
# threads. Prints per variant the median of the runs' medians, and the fastest run's median (on a shared machine the
# runs fall into a fast and a slow mode a factor of two apart; the fast one is the machine's own speed).
#   bench/run_call_cost_fake.sh BUILD_DIR N SHIM_SO... [-- call_cost args]
#   e.g. bench/run_call_cost_fake.sh build 21 /tmp/before/libncclwatch.so build/shim/libncclwatch.so -- --group 2
# Variants: noevents (NCCLWATCH_GPU_EVENTS=0), sampled (the default), held (FAKE_CUDA_HOLD_ALL=1: the GPU never
# catches up, so every op's events stay pending: CPU run-ahead at its worst), all (NCCLWATCH_GPU_SAMPLE=all).
set -u
build=$1
n=$2
shift 2
shims=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    shims+=("$1")
    shift
done
[ $# -gt 0 ] && shift
export NCCLWATCH_DIR=$(mktemp -d /tmp/ncw-bench-XXXXXX)
trap 'rm -rf "$NCCLWATCH_DIR"' EXIT
exe="$build/bench/call_cost_fake"
run() {  # run SHIM_INDEX|base VARIANT
    [ "$1" = base ] && { taskset -c 1 "$exe" "${args[@]}"; return; }
    local env=(X=1)
    case $2 in
    noevents) env=(NCCLWATCH_GPU_EVENTS=0) ;;
    held) env=(FAKE_CUDA_HOLD_ALL=1) ;;
    all) env=(NCCLWATCH_GPU_SAMPLE=all) ;;
    esac
    env "${env[@]}" LD_PRELOAD="$build/test/fake_cuda/libcuda.so.1 ${shims[$1]}" taskset -c 1 "$exe" "${args[@]}" \
        2>/dev/null
}
args=("$@")
keys=(base)
for i in "${!shims[@]}"; do for v in noevents sampled held all; do keys+=("$i:$v"); done; done
declare -A med
for _ in $(seq "$n"); do
    for k in "${keys[@]}"; do
        out=$(run "${k%%:*}" "${k#*:}")
        med[$k]+=" $(echo "$out" | sed -n 's/.*median \([0-9.]*\) ns.*/\1/p')"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fastest() { tr ' ' '\n' | grep . | sort -g | head -1; }
for i in "${!shims[@]}"; do echo "shim $i: ${shims[$i]}"; done
for k in "${keys[@]}"; do
    printf '%-12s median of %d runs %7.1f ns/call, fastest run %7.1f   runs:%s\n' "$k" "$n" \
        "$(echo "${med[$k]}" | median)" "$(echo "${med[$k]}" | fastest)" "${med[$k]}"
done

#!/bin/bash
# Alternates the call-cost benchmark without and with the shim, N times, and prints the median of the medians.
#   bench/run_call_cost.sh SHIM_SO BENCH_EXE [N] [fake|gpu]
#   e.g. bench/run_call_cost.sh build/shim/libncclwatch.so build/bench/call_cost_fake 9
#   NCW_CALL_COST_ARGS="--group 2" bench/run_call_cost.sh ...: per group of two all_reduces on two communicators
# gpu: run on the device machine with LD_LIBRARY_PATH naming torch's libnccl.so.2 and libcudart.so.13; the extra
# variants show the cost of the completion events (default: sampled, most ops carry none; GPU_SAMPLE=all: two per op;
# with GPU_REACHED=0 as well: one per op; GPU_EVENTS=0: none).
set -u
shim=$1
n=${3:-7}
kind=${4:-fake}
export NCCLWATCH_DIR=$(mktemp -d /tmp/ncw-bench-XXXXXX)
trap 'rm -rf "$NCCLWATCH_DIR"' EXIT
exe=("$2")
[ "$kind" = gpu ] && exe+=(--cuda)
# More arguments for the benchmark, e.g. NCW_CALL_COST_ARGS="--group 2" (all_reduce_perf -g 2's group launches).
read -r -a more <<<"${NCW_CALL_COST_ARGS:-}"
exe+=("${more[@]}")
declare -A results
variants=(baseline shim)
[ "$kind" = gpu ] && variants=(baseline shim shim_sample_all shim_one_event shim_no_events)
for i in $(seq "$n"); do
    for v in "${variants[@]}"; do
        case $v in
        baseline) out=$("${exe[@]}") ;;
        shim) out=$(LD_PRELOAD=$shim "${exe[@]}" 2>/dev/null) ;;
        shim_sample_all) out=$(NCCLWATCH_GPU_SAMPLE=all LD_PRELOAD=$shim "${exe[@]}" 2>/dev/null) ;;
        shim_one_event) out=$(NCCLWATCH_GPU_SAMPLE=all NCCLWATCH_GPU_REACHED=0 LD_PRELOAD=$shim "${exe[@]}" 2>/dev/null) ;;
        shim_no_events) out=$(NCCLWATCH_GPU_EVENTS=0 LD_PRELOAD=$shim "${exe[@]}" 2>/dev/null) ;;
        esac
        results[$v]="${results[$v]:-} $(echo "$out" | sed -n 's/.*median \([0-9.]*\) ns.*/\1/p')"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${results[baseline]}" | median)
for v in "${variants[@]}"; do
    m=$(echo "${results[$v]}" | median)
    printf '%-16s median of %d medians: %7.1f ns/call (added: %6.1f ns)   runs:%s\n' "$v" "$n" "$m" \
        "$(awk -v a="$m" -v b="$base" 'BEGIN {print a - b}')" "${results[$v]}"
done

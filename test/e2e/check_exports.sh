#!/bin/bash
# libncclwatch.so: no DT_NEEDED on NCCL, CUDA, spdlog, fmt or libunwind; exports exactly the API table's functions
# (NCCL's, and the CUDA runtime's graph calls: NCW_CUDART_HOOKED) and NCCL's profiler-plugin tables (NCW_PROFILER_VERSIONS), _exit/_Exit (how the process ended: process_end.cpp)
# ncclwatch_note_exception (its last words) and ncclwatch_note_torch_timeout (its process groups' timeout), from the
# launcher's Python hook.
set -u
so=$1
table=$2
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "DT_NEEDED: $(echo $needed)"
for bad in nccl cuda spdlog fmt unwind; do
    if echo "$needed" | grep -qi "$bad"; then echo "FAIL: DT_NEEDED on $bad" >&2; exit 1; fi
done
exported=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TWDBRV]$/ {print $3}' | sort)
want=$( (grep -oE '^ *X\((nccl[A-Za-z]+|cuda[A-Za-z_]+),' "$table" | sed -E 's/^ *X\(([A-Za-z_]+),/\1/'
        sed -n 's/^#define NCW_PROFILER_VERSIONS(X) //p' "$table" | grep -oE '[0-9]+' | sed 's/^/ncclProfiler_v/'
        echo _exit; echo _Exit; echo ncclwatch_note_exception; echo ncclwatch_note_torch_timeout) | sort)
if [ "$exported" != "$want" ]; then
    echo "FAIL: exported symbols differ from the API table" >&2
    diff <(echo "$want") <(echo "$exported") >&2
    exit 1
fi
echo "ok: $(echo "$exported" | wc -l) NCCL entry points and profiler tables exported, nothing else"

#!/bin/bash
# Memory of one rank with and without the shim (default ring), and the size of its rank file.
#   bench/memory.sh BUILD_DIR
set -u
b=$1
export NCCLWATCH_DIR=$(mktemp -d /tmp/ncw-mem-XXXXXX)
trap 'rm -rf "$NCCLWATCH_DIR"' EXIT
measure() {  # prints VmRSS and thread count of rank 0 while it holds after 20000 all_reduces
    "$@" "$b/test/fake_nccl/fake_launch" --nproc 2 -- "$b/test/fake_nccl/fake_rank" --steps 20000 --count 8 \
        --hold-ms 3000 >/dev/null 2>&1 &
    local launcher=$! pid=""
    sleep 2  # a benchmark, not a test: the 20000 steps take well under the 3 s hold
    pid=$(pgrep -P "$launcher" | head -1)
    echo "$(awk '/^VmRSS|^Threads/ {printf "%s %s %s  ", $1, $2, $3}' /proc/$pid/status)"
    wait $launcher
}
echo "without the shim: $(measure env)"
echo "with the shim:    $(measure env LD_PRELOAD=$b/shim/libncclwatch.so)"
ls -l "$NCCLWATCH_DIR"/*/*.ncw | awk '{print "rank file:", $5, "bytes"}' | head -1

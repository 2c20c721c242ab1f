#!/bin/bash
# Builds nccl-tests' all_reduce_perf and sendrecv_perf for the H200 (sm_90) here, never inside this repository, and
# copies them stripped to a carry folder. Their code is never committed: get the source with the search tool's
# fetch of NVIDIA/nccl-tests (then `git -C <mirror>/repo archive HEAD | tar x -C SRC`).
#   test/gpu/build_nccl_tests.sh SRC BUILD CARRY      e.g. /work/nccl-tests-src /work/nccl-tests-build .carry-gpu
# Links libnccl.so.2 dynamically (no RPATH: run.sh points LD_LIBRARY_PATH at torch's NCCL 2.28.9) and cudart
# statically; headers and the link-time libnccl from NCCL_HOME (here /usr/local/cuda: nccl.h 2.28.9). MPI off.
set -eu
src=$1 build=$2 carry=$3
nccl_home=${NCCL_HOME:-/usr/local/cuda}
make -C "$src/src" -j2 BUILDDIR="$build" NCCL_HOME="$nccl_home" CUDA_HOME=/usr/local/cuda MPI=0 \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" CUDARTLIB=cudart_static "BIN_FILES_LIST=all_reduce sendrecv"
mkdir -p "$carry"
for b in all_reduce_perf sendrecv_perf; do
    strip -o "$carry/$b" "$build/$b"
    echo "$carry/$b: $(readelf -d "$carry/$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
done

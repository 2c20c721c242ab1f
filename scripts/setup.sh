#!/bin/bash
# Installs what ncclwatch needs from Debian's packages (on a fresh Debian 12 machine) and builds it in build/.
# Idempotent: a second run only rebuilds. NCCL and CUDA come in as headers only, from the CUDA toolkit in
# /usr/local/cuda (its nccl.h is NCCL 2.28.9); override with NCCL_HEADERS=/path/to/include.
#   scripts/setup.sh           everything: the product, the tests and the benchmarks, and what they need
#   scripts/setup.sh --demo    what the demo needs only (scripts/demo.sh): the build's packages, then the shim,
#                              the collector and the test NCCL in build-demo/
set -euo pipefail
cd "$(dirname "$0")/.."
demo=0
[ "${1:-}" = --demo ] && demo=1

# The build's own: the compiler, meson, and the header-only libraries (CLI11 for the collector's command line).
packages=(meson ninja-build g++ pkg-config libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev python3 binutils)
if [ $demo = 0 ]; then  # the tests' and the benchmarks'
    packages+=(catch2 libunwind-dev procps util-linux)
    packages+=(clang libclang-rt-14-dev)  # test/fuzz's libFuzzer targets (Debian 12 names; skipped when absent)
    packages+=(prometheus)  # its promtool checks the /metrics output (test/e2e/metrics_utf8.sh; skipped when absent)
    packages+=(python3-mesonpy python3-build python3-wheel python3-venv twine)  # scripts/build_wheel.py, e2e wheel
    packages+=(python3-jsonschema)  # test/schema/validate_json.py checks every JSON the tests make (docs/schemas/)
    packages+=(valgrind)  # bench/hot_path_budget.sh: the hot path's instruction and locked counts (callgrind)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

headers=${NCCL_HEADERS:-/usr/local/cuda/include}
if [ ! -f "$headers/nccl.h" ] || [ ! -f "$headers/cuda.h" ]; then
    echo "setup: nccl.h and cuda.h are needed (headers only) and were not found in $headers." >&2
    echo "       Install the CUDA toolkit with NCCL, or set NCCL_HEADERS to the folder that holds them." >&2
    exit 1
fi

if [ $demo = 1 ]; then
    # The demo's own build folder, at -O1 without debug information: half the compile time of build/'s -O2 -g, for
    # a 4-rank job on CPU. build/ stays the product's build, which the tests and benchmarks measure.
    if [ ! -f build-demo/build.ninja ]; then
        meson setup build-demo -Doptimization=1 -Ddebug=false -Dbench=false -Dnccl_headers="$headers" >/dev/null
    fi
    ninja -C build-demo shim/libncclwatch.so collector/ncclwatch-collector test/fake_nccl/libnccl.so.2 \
        test/fake_nccl/libfakeframework.so test/fake_nccl/fake_rank test/fake_nccl/fake_launch >/dev/null
    echo "setup: built the demo's shim, collector and test NCCL in build-demo/"
    exit 0
fi
if [ ! -f build/build.ninja ]; then
    meson setup build -Dnccl_headers="$headers" >/dev/null
fi
ninja -C build >/dev/null
echo "setup: built build/shim/libncclwatch.so and build/collector/ncclwatch-collector"

#!/bin/bash
# Installs what ncclwatch needs from Debian's packages (on a fresh Debian 12 machine) and builds it in build/.
# Idempotent: a second run only rebuilds. NCCL and CUDA come in as headers only, from the CUDA toolkit in
# /usr/local/cuda (its nccl.h is NCCL 2.28.9); override with NCCL_HEADERS=/path/to/include.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build g++ pkg-config catch2 libspdlog-dev libfmt-dev libunwind-dev
          nlohmann-json3-dev libcli11-dev python3 procps util-linux binutils clang libclang-rt-14-dev prometheus)
packages+=(python3-mesonpy python3-build python3-wheel python3-venv)  # the wheel: scripts/build_wheel.py, test/e2e/wheel.sh
packages+=(python3-jsonschema)  # test/schema/validate_json.py checks every JSON the tests make (docs/schemas/)
packages+=(valgrind)  # bench/hot_path_budget.sh: the hot path's instruction and locked-instruction counts (callgrind)
# libcli11-dev: the collector's command line (CLI11, header-only).
# clang and libclang-rt-14-dev: the libFuzzer targets in test/fuzz (Debian 12 names; skipped when absent).
# prometheus: its promtool checks the /metrics output (test/e2e/metrics_utf8.sh; skipped when absent).
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

if [ ! -f build/build.ninja ]; then
    meson setup build -Dnccl_headers="$headers" >/dev/null
fi
ninja -C build >/dev/null
echo "setup: built build/shim/libncclwatch.so and build/collector/ncclwatch-collector"

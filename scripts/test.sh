#!/bin/bash
# Every test: set-up, the unit tests, the test NCCL's own tests, the end-to-end tests under LD_PRELOAD, the fuzzers,
# the wheel, the hot path's instruction budget, and the unit tests again in an AddressSanitizer +
# UndefinedBehaviorSanitizer build. CI runs this (.ci/run). The fast loop while changing the code is
# `meson test -C build --suite unit` (CONTRIBUTING.md).
#
# Time: the sanitizer build compiles at the lowest priority while the main build's tests run (they mostly wait on
# their jobs' timeouts, and keep the CPU first when they need it); its unit tests run last.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh || exit 1
echo "test: set up and built in $(($(date +%s) - start)) s"

# The sanitizer build runs the unit tests; the LD_PRELOAD tests are left out (the sanitizer runtime must come first
# in the process, which a preloaded shim in someone else's program cannot arrange). `meson test` builds only what
# the selected tests need.
if [ ! -f build-asan/build.ninja ]; then
    # -g1: line tables only (the sanitizers' reports name file and line), a tenth of the compile time less than -g.
    meson setup build-asan -Dbuildtype=debug -Dcpp_args=-g1 -Db_sanitize=address,undefined -Db_lundef=false \
        -De2e=false -Dbench=false -Dnccl_headers="${NCCL_HEADERS:-/usr/local/cuda/include}" >/dev/null || exit 1
fi
asan_log=build-asan/test.sh.log
(
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0
    nice -n 19 meson test -C build-asan --suite unit --print-errorlogs --num-processes 2 >"$asan_log" 2>&1
) &
asan=$!

status=0
meson test -C build --print-errorlogs --num-processes 2 || status=1
echo "test: the main build's tests done at $(($(date +%s) - start)) s; waiting for the sanitizer build's"
wait $asan || status=1
tail -n 25 "$asan_log"

# One summary line for whoever reads the log.
passed=$(grep -h '^Ok:' build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt 2>/dev/null | awk '{s+=$2} END {print s+0}')
failed=$(grep -h '^Fail:' build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt 2>/dev/null | awk '{s+=$2} END {print s+0}')
echo "$passed passed, $failed failed, in $(($(date +%s) - start)) s"
exit $status

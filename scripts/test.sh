#!/bin/bash
# Every test: set-up, the unit tests, the test NCCL's own tests, the end-to-end tests under LD_PRELOAD, and the
# unit tests again in an AddressSanitizer + UndefinedBehaviorSanitizer build. CI runs this (.ci/run).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

status=0
meson test -C build --print-errorlogs --num-processes 2 || status=1

# The sanitizer build runs the unit tests and the test NCCL; the LD_PRELOAD tests are left out (the sanitizer
# runtime must come first in the process, which a preloaded shim in someone else's program cannot arrange).
if [ ! -f build-asan/build.ninja ]; then
    meson setup build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false -De2e=false -Dbench=false \
        -Dnccl_headers="${NCCL_HEADERS:-/usr/local/cuda/include}" >/dev/null || exit 1
fi
ninja -C build-asan >/dev/null || exit 1
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0 \
    meson test -C build-asan --suite unit --print-errorlogs --num-processes 2 || status=1

# One summary line for whoever reads the log.
passed=$(grep -h '^Ok:' build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt 2>/dev/null | awk '{s+=$2} END {print s+0}')
failed=$(grep -h '^Fail:' build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt 2>/dev/null | awk '{s+=$2} END {print s+0}')
echo "$passed passed, $failed failed"
exit $status

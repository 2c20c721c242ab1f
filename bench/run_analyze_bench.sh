#!/bin/bash
# Times `ncclwatch-collector analyze` on NRANKS generated rank files of a full ring (default 1,024 x 16,384
# records, 2.3 GB), warm and with the files evicted from the page cache (posix_fadvise DONTNEED on our files only),
# then the --trace cost separately.
#   bash bench/run_analyze_bench.sh BUILD_DIR [NRANKS] [RING]
set -eu
BUILD=${1:-build}
N=${2:-1024}
RING=${3:-16384}
DIR=$(mktemp -d /tmp/ncw-analyze-bench-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$BUILD/bench/gen_rank_files" "$DIR/files" "$N" "$RING"
evict() {
    /usr/bin/python3 -c '
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)' "$1"
}
sync
evict "$DIR/files"
echo "== text, cold page cache"
time "$BUILD/collector/ncclwatch-collector" analyze "$DIR/files" >"$DIR/report.txt" || true
echo "== text, warm"
time "$BUILD/collector/ncclwatch-collector" analyze "$DIR/files" >/dev/null || true
echo "== json, warm"
time "$BUILD/collector/ncclwatch-collector" analyze --json "$DIR/files" >/dev/null || true
echo "== trace (default 500 ops per rank), warm"
time "$BUILD/collector/ncclwatch-collector" analyze --trace "$DIR/trace.json" "$DIR/files" >/dev/null || true
ls -la "$DIR/trace.json"
head -1 "$DIR/report.txt"

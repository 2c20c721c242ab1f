#!/bin/bash
# Times `ncclwatch-collector analyze` on NRANKS generated rank files of a full ring (default 1,024 x 16,384
# records, 2.3 GB): with the files evicted from the page cache (posix_fadvise DONTNEED on our files only) on every
# core and on one (taskset -c 0), then cached, `--json` and `--trace`, and where the time goes (bench/analyze_phases).
#   bash bench/run_analyze_bench.sh BUILD_DIR [NRANKS] [RING]
# The files take NRANKS x 2.4 MB under /tmp (16,384: 39 GB); they are removed at the end.
set -eu
BUILD=${1:-build}
N=${2:-1024}
RING=${3:-16384}
DIR=$(mktemp -d /tmp/ncw-analyze-bench-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$BUILD/bench/gen_rank_files" "$DIR/files" "$N" "$RING"
evict() {
    sync
    /usr/bin/python3 -c '
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)' "$1"
}
COLLECTOR="$BUILD/collector/ncclwatch-collector"
echo "$(nproc) cores; $(uptime)"
evict "$DIR/files"
echo "== text, cold page cache, all cores"
time "$COLLECTOR" analyze "$DIR/files" >"$DIR/report.txt" || true
evict "$DIR/files"
echo "== text, cold page cache, one core (taskset -c 0)"
time taskset -c 0 "$COLLECTOR" analyze "$DIR/files" >/dev/null || true
echo "== text, warm"
time "$COLLECTOR" analyze "$DIR/files" >/dev/null || true
echo "== json, warm"
time "$COLLECTOR" analyze --json "$DIR/files" >/dev/null || true
echo "== trace (default 500 ops per rank), warm"
time "$COLLECTOR" analyze --trace "$DIR/trace.json" "$DIR/files" >/dev/null || true
ls -la "$DIR/trace.json"
evict "$DIR/files"
echo "== phases, cold page cache"
"$BUILD/bench/analyze_phases" "$DIR/files"
echo "== phases, warm, one reading thread"
"$BUILD/bench/analyze_phases" "$DIR/files" 1
head -1 "$DIR/report.txt"

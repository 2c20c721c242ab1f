#!/bin/bash
# Regenerates the golden rank files (dumps.tar.gz) by running small fake-NCCL jobs under the shim, then the expected
# reports (via check_golden.sh UPDATE=1). Run from the repository root after building:
#   bash test/golden/make_golden.sh build
# Ranks run in their own UTS namespace with fixed host names when `unshare --uts` works (root), so the files do not
# carry this machine's name; rings are 256 records (NCCLWATCH_RING_SIZE) to keep the set small.
set -u
BUILD=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SHIM=$BUILD/shim/libncclwatch.so
COLLECTOR=$BUILD/collector/ncclwatch-collector
LAUNCH=$BUILD/test/fake_nccl/fake_launch
RANK_EXE=$BUILD/test/fake_nccl/fake_rank
WORK=$(mktemp -d /tmp/ncw-golden-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export NCCLWATCH_RING_SIZE=256 NCCLWATCH_TIMEOUT_SEC=1 FAKE_NCCL_TIMEOUT_SEC=60
unset NCCLWATCH_ENABLE NCCLWATCH_ACTION

# The per-rank wrapper: folder and host name per "node" (NODE_SPLIT ranks per node; 0 = one node).
cat >"$WORK/rank.sh" <<'WRAP'
#!/bin/bash
node=0
[ "${NODE_SPLIT:-0}" -gt 0 ] && node=$((RANK / NODE_SPLIT))
name=$(printf "node-%s" "$(echo abcdefgh | cut -c$((node + 1)))")
export NCCLWATCH_DIR="$GOLDEN_CASE_DIR$([ "${NODE_SPLIT:-0}" -gt 0 ] && echo "/$name")"
if unshare --uts true 2>/dev/null; then exec unshare --uts /bin/sh -c 'hostname "$0"; exec "$@"' "$name" "$@"; fi
exec "$@"
WRAP
chmod +x "$WORK/rank.sh"

wait_for() {
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || { echo "timed out: $*" >&2; exit 1; }
        sleep 0.1
    done
}
count() { [ "$(find "$GOLDEN_CASE_DIR" -name "$1" | wc -l)" -ge "$2" ]; }
says() { "$COLLECTOR" analyze "$GOLDEN_CASE_DIR" 2>/dev/null | head -1 | grep -q "$1"; }

# run_case NAME NPROC NODE_SPLIT WAIT_KIND WAIT_ARG fake_rank args...
#   WAIT_KIND: exit (runs to its end), reports N (until N stall reports, then SIGKILL), says TEXT (until analyze's
#   verdict line says TEXT, then SIGKILL).
run_case() {
    local name=$1 n=$2 split=$3 kind=$4 arg=$5
    shift 5
    export GOLDEN_CASE_DIR="$WORK/dumps/$name" NODE_SPLIT=$split NCCLWATCH_JOB_ID="golden-$name"
    mkdir -p "$GOLDEN_CASE_DIR"
    LD_PRELOAD="$SHIM" setsid "$LAUNCH" --nproc "$n" --timeout-sec 60 -- "$WORK/rank.sh" "$RANK_EXE" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    case $kind in
        exit) wait $pid ;;
        reports) wait_for 30 count '*.report.json' "$arg" ;;
        says) wait_for 30 says "$arg" ;;
    esac
    kill -KILL -- "-$pid" 2>/dev/null
    wait $pid 2>/dev/null
    find "$GOLDEN_CASE_DIR" -type f ! -name '*.ncw' -delete
    echo "$name: $(find "$GOLDEN_CASE_DIR" -name '*.ncw' | wc -l) rank files"
}

run_case skip 4 0 reports 3 --steps 6 --skip-rank 2 --skip-step 3 --hold-ms 60000
run_case mismatch 4 0 exit - --steps 6 --mismatch-rank 1 --mismatch-step 3 --mismatch-kind count
run_case clean 4 0 exit - --steps 6 --split --group --bcast-every 3
run_case sigkill 3 0 says "is gone" --steps 6 --die-rank 1 --die-step 3 --hold-ms 60000
run_case two_nodes 4 2 reports 3 --steps 6 --skip-rank 3 --skip-step 3 --hold-ms 60000

tar -C "$WORK/dumps" -czf "$HERE/dumps.tar.gz" --owner=0 --group=0 --sort=name .
ls -la "$HERE/dumps.tar.gz"
UPDATE=1 bash "$HERE/check_golden.sh" "$COLLECTOR"

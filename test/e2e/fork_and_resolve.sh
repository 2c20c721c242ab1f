#!/bin/bash
# A forked child (a DataLoader worker) neither inherits a watchdog nor writes into its parent's file; a child that
# initialises NCCL itself gets its own file. The program links libnccl.so.2 directly, so the real functions are
# found through RTLD_NEXT (the other tests reach them through the loaded library's pncclX).
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=60 NCCLWATCH_JOB_ID=forktest
out=$(LD_PRELOAD="$NCW_SHIM" "$FORK_PROBE" 2>"$WORK/launch.err") || fail "fork_probe failed: $out"
echo "$out"
echo "$out" | grep -q "child threads before its own init: 1" || fail "the child inherited a thread"
# The watchdog, and perhaps the environment probe's short-lived thread (shim/record/env_probe.h) still scanning.
echo "$out" | grep -qE "child threads after its own init: [23]$" || fail "the child's own init started no watchdog"
d=$NCCLWATCH_DIR/forktest
[ "$(ls "$d"/*.ncw | wc -l)" = 2 ] || fail "want one rank file for the parent and one for the child"
for f in "$d"/*.ncw; do
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/d.json" || fail "cannot read $f"
    pid=$(json_get "$WORK/d.json" "d['header']['pid']")
    n=$(json_get "$WORK/d.json" "len([r for r in d['records']['items'] if r['op']=='AllReduce'])")
    if echo "$out" | grep -q "parent pid $pid"; then
        [ "$n" = 4 ] || fail "the parent's file holds $n all_reduces, want 4 (3 before the fork, 1 after)"
    else
        [ "$n" = 2 ] || fail "the child's file holds $n all_reduces, want 2"
    fi
done
echo "ok: fork-safe, resolved through RTLD_NEXT"

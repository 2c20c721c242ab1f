#!/bin/bash
# Two "nodes": ranks 0-1 write into one folder, ranks 2-3 into another (NCCLWATCH_DIR set per rank by a wrapper,
# as two hosts' local disks would be). Rank 3 skips an all_reduce. Analysed offline from both folders, the report
# names rank 3 NOT_JOINED; from node A's folder alone it names the missing ranks 2-3 and cannot see the culprit.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=1
two_nodes
mkdir -p "$NODES"
LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 -- "$WORK/per_node.sh" "$FAKE_RANK" \
    --steps 8 --skip-rank 3 --skip-step 4 --hold-ms 60000 >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!

reports() { [ "$(ls "$NODES"/node-*/*/*.report.json 2>/dev/null | wc -l)" -ge "$1" ]; }
# The waiting ranks 0-2 report the stall; rank 2 (node B) sees rank 3 beside it.
wait_for 30 reports 3 || fail "no stall reports from the waiting ranks"
[ "$(ls "$NODES"/node-a/*/*.ncw | wc -l)" = 2 ] || fail "node A's folder should hold ranks 0-1"
[ "$(ls "$NODES"/node-b/*/*.ncw | wc -l)" = 2 ] || fail "node B's folder should hold ranks 2-3"

# Both folders: the culprit, by global rank, with its host and pid, on the first line.
"$NCW_COLLECTOR" analyze "$NODES/node-a" "$NODES/node-b" >"$WORK/both.txt"
rc=$?
[ $rc = 1 ] || fail "analyze of both folders: exit $rc, want 1"
head -1 "$WORK/both.txt" | grep -q "^VERDICT  rank 3 (host .*, pid [0-9]*) never issued AllReduce #8 on communicator 0x[0-9a-f]* (world, 4 ranks); 3 ranks wait in it since [0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]\{3\}[+-][0-9][0-9]:[0-9][0-9]$" ||
    fail "verdict line: $(head -1 "$WORK/both.txt")"
grep -q "not visible" "$WORK/both.txt" && fail "both folders: no rank should be missing"

"$NCW_COLLECTOR" analyze --json "$NODES/node-a" "$NODES/node-b" >"$WORK/both.json"
[ "$(json_get "$WORK/both.json" "d['verdicts'][0]['kind']")" = NOT_JOINED ] || fail "JSON: want NOT_JOINED first"
[ "$(json_get "$WORK/both.json" "d['verdicts'][0]['culprits'][0]['global_rank']")" = 3 ] || fail "JSON: culprit not 3"
[ "$(json_get "$WORK/both.json" "d['files_read']")" = 4 ] || fail "JSON: want 4 files read"
"$PY" "$(dirname "$0")/../golden/check_schema.py" "$(dirname "$0")/../../docs/schemas/analysis.schema.json" \
    "$WORK/both.json" || fail "the JSON does not follow docs/schemas/analysis.schema.json"

# The trace: one track per rank, the outstanding all_reduce of the waiting ranks marked, the verdict as an instant.
"$NCW_COLLECTOR" analyze --trace "$WORK/trace.json" "$NODES" >/dev/null 2>"$WORK/trace.err"
[ $? = 1 ] || fail "analyze --trace: want exit 1"
tracks=$(json_get "$WORK/trace.json" "len(set(e['tid'] for e in d['traceEvents'] if e['ph']=='X'))")
[ "$tracks" = 4 ] || fail "trace: $tracks rank tracks, want 4"
out=$(json_get "$WORK/trace.json" "sorted(e['tid'] for e in d['traceEvents'] if e['ph']=='X' and e['args']['outstanding'])")
[ "$out" = "[0, 1, 2]" ] || fail "trace: outstanding ops on ranks $out, want [0, 1, 2]"
json_get "$WORK/trace.json" "[e['name'] for e in d['traceEvents'] if e['ph']=='i' and e['cat']=='verdict']" |
    grep -q NOT_JOINED || fail "trace: no NOT_JOINED instant"

# One folder only: node B's ranks are named missing; the report cannot name rank 3 and says so.
"$NCW_COLLECTOR" analyze "$NODES/node-a" >"$WORK/one.txt"
rc=$?
[ $rc = 1 ] || fail "analyze of node A alone: exit $rc, want 1 (ranks wait)"
grep -q "missing ranks: comm ranks 2,3 of communicator" "$WORK/one.txt" || fail "one folder: missing ranks 2-3 not named"
head -1 "$WORK/one.txt" | grep -q "culprit is not visible" || fail "one folder: verdict line $(head -1 "$WORK/one.txt")"

# A corrupt file among them: named, the rest analysed.
head -c 100 /dev/urandom >"$NODES/node-b/garbage.ncw"
"$NCW_COLLECTOR" analyze "$NODES" >"$WORK/corrupt.txt"
[ $? = 1 ] || fail "a corrupt file should not stop the analysis"
grep -q "unreadable file: .*garbage.ncw" "$WORK/corrupt.txt" || fail "the corrupt file is not named"
head -1 "$WORK/corrupt.txt" | grep -q "rank 3 .*never issued" || fail "corrupt file spoiled the verdict"

# Nothing readable: exit 2.
"$NCW_COLLECTOR" analyze "$NODES/node-b/garbage.ncw" >/dev/null 2>&1
[ $? = 2 ] || fail "nothing readable: want exit 2"
echo "ok: two folders analysed offline name rank 3; one folder names ranks 2-3 missing"

#!/bin/bash
# Golden reports: analyses the committed rank files (dumps.tar.gz, made by make_golden.sh) and compares the text
# and JSON reports with the expected ones (CASE.txt, CASE.json); checks each JSON against the schema, and the exit
# codes. The offline "now" comes from the files and the paths are relative, so the output is stable; TZ is fixed.
#   check_golden.sh COLLECTOR         compare
#   UPDATE=1 check_golden.sh COLLECTOR  rewrite the expected files (review the diff before committing)
set -u
COLLECTOR=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
WORK=$(mktemp -d /tmp/ncw-golden-check-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export TZ=UTC NO_COLOR=1
tar -C "$WORK" -xzf "$HERE/dumps.tar.gz" || { echo "FAIL: cannot unpack dumps.tar.gz"; exit 1; }
cd "$WORK" || exit 1
# Damage made here, not committed: one file cut inside its ring, one cut inside its header.
mkdir -p damaged
cp skip/*/*.ncw damaged/
files=(damaged/*.ncw)
truncate -s 240000 "${files[1]}"
truncate -s 100 "${files[3]}"

failed=0
# check CASE WANT_RC FOLDER...
check() {
    local name=$1 want=$2
    shift 2
    "$COLLECTOR" analyze --color=never "$@" >"$WORK/$name.txt" 2>"$WORK/$name.stderr"
    local rc=$?
    "$COLLECTOR" analyze --json "$@" >"$WORK/$name.json" 2>/dev/null
    local rc_json=$?
    if [ "$rc" != "$want" ] || [ "$rc_json" != "$want" ]; then
        echo "FAIL: $name: exit $rc (json $rc_json), want $want"
        failed=1
    fi
    "$PY" "$HERE/check_schema.py" "$HERE/../../docs/schemas/analysis.schema.json" "$WORK/$name.json" ||
        { echo "FAIL: $name: JSON does not follow the schema"; failed=1; }
    "$PY" "$HERE/../schema/validate_json.py" "$WORK/$name.json" ||
        { echo "FAIL: $name: JSON does not follow docs/schemas/ (validate_json.py)"; failed=1; }
    # The collector's version and commit change with every commit (test/e2e/cli.sh checks them): not compared here.
    # The stand-in still reads as a version, so the golden files themselves follow the schema (meson test
    # schema_golden).
    sed -i 's/^  "ncclwatch_version": "[^"]*"/  "ncclwatch_version": "0.0.0+golden (unknown)"/' "$WORK/$name.json"
    for ext in txt json; do
        if [ "${UPDATE:-0}" = 1 ]; then
            cp "$WORK/$name.$ext" "$HERE/$name.$ext"
        elif ! diff -u "$HERE/$name.$ext" "$WORK/$name.$ext"; then
            echo "FAIL: $name.$ext differs from the golden file (UPDATE=1 $0 COLLECTOR rewrites it)"
            failed=1
        fi
    done
}

check skip 1 skip
check mismatch 1 mismatch
check clean 0 clean
check sigkill 1 sigkill
check two_nodes 1 two_nodes/node-a two_nodes/node-b
check two_nodes_missing 1 two_nodes/node-a
check two_jobs 1 skip mismatch
check damaged 1 damaged
[ $failed = 0 ] && echo "ok: golden reports match"
exit $failed

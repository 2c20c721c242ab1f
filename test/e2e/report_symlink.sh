#!/bin/bash
# Attack test (issue item 7): the live report's temporary files must not follow a planted symlink. Every check
# states the right answer (lib/read/safe_write.cpp, write_job_file).
#
# The collector writes <out>/<job>/live-report.txt (then .json) through a fixed "<name>.tmp" opened with fopen "w",
# in a folder named by the job id a client sends. Someone who can write there (or create it first: the job id is
# theirs to choose) plants live-report.txt.tmp and live-report.json.tmp as symlinks to victim files. Then a real
# 4-rank job (NCCLWATCH_JOB_ID=symjob) whose rank 2 skips step 5 hangs and is reported live.
# RIGHT ANSWER: the hang is reported (NOT_JOINED, culprits [2]); both victims are byte-for-byte unchanged; the
# live-report.txt and live-report.json left in the folder are regular files (not symlinks) holding the report.
# (A fix: open the temporary file with O_CREAT|O_EXCL|O_NOFOLLOW under a unique name - mkstemp - in a folder opened
# with O_DIRECTORY|O_NOFOLLOW, then rename it.)
# The shim's side: its job folder NCCLWATCH_DIR/symjob is planted as a symlink to another folder. RIGHT ANSWER: nothing
# is written there (no rank file, report or dump: the ranks record in memory and say so), and the hang is still
# reported live. (Its temporary names are covered by the unit test safe_write: they hold the pid.)
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~40 s.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
stop_serve() {
    [ -n "$SERVE_PID" ] && kill -KILL "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    SERVE_PID=""
}
trap 'stop_serve; cleanup' EXIT

OUT="$WORK/out"
JOB=symjob
mkdir -p "$OUT/$JOB"
printf 'victim text file: must stay as it is\n' >"$WORK/victim.txt"
printf '{"victim": "json file, must stay as it is"}\n' >"$WORK/victim.json"
cp "$WORK/victim.txt" "$WORK/victim.txt.orig"
cp "$WORK/victim.json" "$WORK/victim.json.orig"
ln -s "$WORK/victim.txt" "$OUT/$JOB/live-report.txt.tmp"
ln -s "$WORK/victim.json" "$OUT/$JOB/live-report.json.tmp"
mkdir -p "$NCCLWATCH_DIR" "$WORK/elsewhere"
ln -s "$WORK/elsewhere" "$NCCLWATCH_DIR/$JOB"

"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 2 --dead-after 3 --out "$OUT" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")
export NCCLWATCH_COLLECTOR="127.0.0.1:$PORT" NCCLWATCH_JOB_ID=$JOB NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30

launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
reported() { grep -q "NOT_JOINED" "$WORK/serve.out" && { grep -q "report written\|cannot write" "$WORK/serve.err" || [ -e "$OUT/$JOB/live-report.json" ]; }; }
wait_for 30 reported || check_fail "no live report of the hang within 30 s: $(tail -3 "$WORK/serve.err")"
sleep 0.5
echo "collector log: $(grep -E "report written|cannot write" "$WORK/serve.err" | head -2)"
ls -l "$OUT/$JOB/" | sed 's/^/  /'
for v in txt json; do
    if cmp -s "$WORK/victim.$v" "$WORK/victim.$v.orig"; then
        echo "victim.$v: unchanged"
    else
        check_fail "victim.$v was overwritten through the planted live-report.$v.tmp symlink (now $(wc -c <"$WORK/victim.$v") bytes: $(head -c 80 "$WORK/victim.$v" | tr '\n' ' '))"
    fi
    f="$OUT/$JOB/live-report.$v"
    if [ -L "$f" ]; then
        check_fail "live-report.$v is a symlink (to $(readlink "$f")): the planted .tmp link was renamed into place"
    elif [ ! -f "$f" ]; then
        check_fail "no live-report.$v written"
    fi
done
grep -q "NOT_JOINED" "$OUT/$JOB/live-report.txt" 2>/dev/null && [ ! -L "$OUT/$JOB/live-report.txt" ] ||
    check_fail "live-report.txt (a regular file) does not hold the NOT_JOINED report"
if [ -f "$OUT/$JOB/live-report.json" ] && [ ! -L "$OUT/$JOB/live-report.json" ]; then
    c=$(json_get "$OUT/$JOB/live-report.json" "d['verdicts'][0]['culprits']")
    [ "$c" = "[2]" ] || check_fail "live-report.json culprits $c, not [2]"
fi

if [ -n "$(ls -A "$WORK/elsewhere")" ]; then
    check_fail "the shim wrote through its symlinked job folder: $(ls "$WORK/elsewhere" | head -5 | tr '\n' ' ')"
else
    echo "the shim's symlinked job folder: nothing written through it"
fi
grep -q "not a folder (a symlink or a file is refused)" "$WORK/launch.err" ||
    check_fail "no rank said why it keeps no rank file: $(grep -m1 'rank file' "$WORK/launch.err")"

checks_done "ok: the planted symlinks were not followed; the live report was written as regular files"
echo "ok: nothing was written through the shim's symlinked job folder"

#!/bin/bash
# Attack test (issue 28, item 7): a dump folder someone else controls. NCCLWATCH_DIR is writable by everyone, without
# the sticky bit, and before each rank starts, someone who can write there has planted symlinks (to a victim file) at
# the two names its rank file would take: rank<R>-<host>-<pid>.ncw and the .1 alternative (the pid is in the name, so
# the names are guessable; here the wrapper knows them exactly: exec keeps its pid). Rank 2 of 4 then skips step 5.
# RIGHT ANSWER:
# - every rank still keeps a rank file, a regular file under a third name (rank<R>-<host>-<pid>.2.ncw), and says once
#   that its name was taken; the victim is byte for byte as it was;
# - so the verdict names the culprit as in a clean folder (NOT_JOINED, culprits [2], in the waiting ranks' reports and
#   in analyze), not "no verdict" from ranks recording in memory only;
# - each rank warns exactly once that the dump root is writable by everyone without the sticky bit (and what to do);
#   so does `serve` of a --out folder anyone can write to.
# (The old code: every rank "cannot keep a rank file (...: File exists)", memory only, no warning about the folder.)
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. About 3 s (bounded: 30 s for the reports).
. "$(dirname "$0")/lib.sh"

JOB=plantjob
export NCCLWATCH_JOB_ID=$JOB NCCLWATCH_TIMEOUT_SEC=2
mkdir -p "$NCCLWATCH_DIR/$JOB"
chmod 0777 "$NCCLWATCH_DIR" # the root: anyone may write there, and rename or replace what is in it
chmod 0750 "$NCCLWATCH_DIR/$JOB"
printf 'victim: must stay as it is\n' >"$WORK/victim"
cp "$WORK/victim" "$WORK/victim.orig"

cat >"$WORK/plant.sh" <<'WRAP'
#!/bin/bash
# Takes this rank's rank-file names first (the host as the shim spells it in file names), then becomes the rank.
host=$(tr -c 'A-Za-z0-9._\n-' '_' </proc/sys/kernel/hostname)
for alt in "" .1; do ln -s "$VICTIM" "$PLANT_DIR/rank$RANK-$host-$$$alt.ncw" || exit 97; done
exec "$@"
WRAP
chmod +x "$WORK/plant.sh"
VICTIM="$WORK/victim" PLANT_DIR="$NCCLWATCH_DIR/$JOB" LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 \
    --timeout-sec 90 -- "$WORK/plant.sh" "$FAKE_RANK" --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000 \
    >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!

# The names were planted (8: two per rank) before any rank started.
wait_for 10 has_files 'rank*.ncw' 8 || fail "the symlinks were not planted: $(ls -l "$(job_dir)")"
wait_for 30 has_files 'rank[013]-*.report.json' 3 || check_fail "no report from the three waiting ranks"
ls -l "$(job_dir)" | sed 's/^/  /'

# Every rank keeps a regular rank file under the next free name, and said so once.
for r in 0 1 2 3; do
    files=$(find "$(job_dir)" -maxdepth 1 -type f -name "rank$r-*.ncw")
    if [ "$(echo "$files" | grep -c .)" != 1 ]; then
        check_fail "rank $r: $(echo "$files" | grep -c .) regular rank file(s), want 1 (its names were taken)"
        continue
    fi
    case "$files" in *-[0-9]*.2.ncw) ;; *) check_fail "rank $r's file $files is not the third name (.2.ncw)" ;; esac
    g=$("$NCW_COLLECTOR" dump --json "$files" 2>/dev/null | "$PY" -c "import json,sys; print(json.load(sys.stdin)['header']['global_rank'])")
    [ "$g" = "$r" ] || check_fail "rank $r's file $files reads as global rank '$g'"
    n=$(grep -c "^\[ncclwatch r$r\] the rank file name .*rank$r-.*\.ncw is taken.* recording to .*\.2\.ncw instead" "$WORK/launch.err")
    [ "$n" = 1 ] || check_fail "rank $r said $n time(s) that its rank file name was taken, want once"
done
grep -q "cannot keep a rank file" "$WORK/launch.err" &&
    check_fail "a rank records in memory only: $(grep -m1 "cannot keep a rank file" "$WORK/launch.err")"
cmp -s "$WORK/victim" "$WORK/victim.orig" || check_fail "the victim was written through a planted symlink"

# The verdict names the culprit, in the shim's reports and in analyze.
for f in "$(job_dir)"/rank[013]-*.report.json; do
    [ -f "$f" ] || continue
    lead="$(stall_lead "$f" kind 2>/dev/null) $(stall_lead "$f" culprits 2>/dev/null)"
    [ "$lead" = "NOT_JOINED [2]" ] || check_fail "$f: lead '$lead', want 'NOT_JOINED [2]'"
done
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/a.json" 2>"$WORK/a.err"
lead=$(json_get "$WORK/a.json" "d['verdicts'][0]['kind'] + ' ' + str([c['comm_rank'] for c in d['verdicts'][0]['culprits']])" 2>/dev/null)
[ "$lead" = "NOT_JOINED [2]" ] || check_fail "analyze's lead verdict '$lead', want NOT_JOINED [2]"

# The world-writable root: one warning per rank, saying what is wrong and what to do.
warn="is writable by everyone (mode 0777) without the sticky bit: chmod go-w $NCCLWATCH_DIR"
for r in 0 1 2 3; do
    n=$(grep -c "^\[ncclwatch r$r\] the dump folder is not yours alone: .*$warn" "$WORK/launch.err")
    [ "$n" = 1 ] || check_fail "rank $r warned $n time(s) about the world-writable dump root, want once"
done
total=$(grep -c "not yours alone" "$WORK/launch.err")
[ "$total" = 4 ] || check_fail "$total warning line(s) about the dump folder, want 4 (one per rank)"

# The live collector says the same, once, of a --out folder anyone can write to.
mkdir -p "$WORK/out"
chmod 0777 "$WORK/out"
"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --out "$WORK/out" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || check_fail "serve did not start: $(cat "$WORK/serve.err")"
kill -KILL "$SERVE_PID" 2>/dev/null
wait "$SERVE_PID" 2>/dev/null
n=$(grep -c "warning: the report folder is not yours alone: $WORK/out is writable by everyone (mode 0777)" "$WORK/serve.err")
[ "$n" = 1 ] || check_fail "serve warned $n time(s) about its world-writable --out, want once: $(cat "$WORK/serve.err")"

echo "rank 0 said:"
grep "^\[ncclwatch r0\]" "$WORK/launch.err" | head -4 | sed 's/^/  /'
echo "analyze's warnings: $(json_get "$WORK/a.json" "d.get('warnings')" 2>/dev/null | head -c 600)"
if [ ${#FAILS[@]} -gt 0 ]; then
    echo "--- launch.err" >&2
    grep "^\[ncclwatch" "$WORK/launch.err" | head -30 >&2
fi
checks_done "ok: every rank kept a rank file under another name, the victim untouched; NOT_JOINED [2]; one folder warning per rank"

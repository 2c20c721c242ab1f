#!/bin/bash
# Communicators created, used and destroyed one after another (more than the rank file's 64 comm slots): the 200th
# gets a reused slot and rank 2 skips an all_reduce on it: reported live and by analyze. Then 1,000 of them in a clean
# job: no report, no failure, and the rank file keeps its size.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --steps 10 --churn-comms 200 --skip-rank 2 --skip-step 5 --hold-ms 60000

wait_for 60 has_files '*.report.json' 3 || fail "no report from the three waiting ranks"
for r in "$(job_dir)"/rank[013]-*.report.json; do
    kind=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
    culprits=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
    seq=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['seq']")
    [ "$kind" = NOT_JOINED ] || fail "$r: verdict $kind, want NOT_JOINED"
    [ "$culprits" = "[2]" ] || fail "$r: culprits $culprits, want [2]"
    [ "$seq" = 10 ] || fail "$r: seq $seq, want 10"
done
grep -q "live communicators" "$WORK/launch.err" && fail "destroyed communicators' slots were not reused"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "collector analyze exit $rc, want 1 (hang found)"
grep -q "NOT_JOINED" "$WORK/analysis.txt" || fail "collector analyze does not say NOT_JOINED"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""

rm -rf "$NCCLWATCH_DIR"
run_job 2 --steps 3 --churn-comms 1000
[ "$JOB_RC" = 0 ] || fail "1,000 communicators: job failed under the shim (rc $JOB_RC)"
[ "$(count_files '*.report.json')" = 0 ] || fail "1,000 communicators: a clean job produced a report"
grep -q "STALL\|MISMATCH" "$WORK/launch.err" && fail "1,000 communicators: a clean job reported a problem"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" || fail "1,000 communicators: analyze found a problem"
for f in "$(job_dir)"/*.ncw; do
    size=$(stat -c %s "$f")
    [ "$size" -le 16777216 ] || fail "$f: $size bytes"
done
# Memory: each communicator's link to NCCL's profiler events (about 300 KB with its in-flight ops) is reused once the
# communicator is finalized, so 1,000 made and dropped cost about what one does (before: 348 MB peak per rank).
rm -rf "$NCCLWATCH_DIR"
LD_PRELOAD="$NCW_SHIM" "$FAKE_LAUNCH" --nproc 2 --timeout-sec 90 -- "$PY" -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print("maxrss_kb=%d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)
sys.exit(rc)' "$FAKE_RANK" --steps 3 --churn-comms 1000 >"$WORK/launch.out" 2>"$WORK/launch.err" ||
    fail "1,000 communicators, measured: job failed"
# The two ranks' lines share the launcher's stdout and may run together on one line: each figure is read on its own.
peaks() { grep -o 'maxrss_kb=[0-9]*' "$WORK/launch.out" | cut -d= -f2; }
for kb in $(peaks); do
    [ "$kb" -le 102400 ] || fail "1,000 communicators made and dropped: a rank peaked at $kb KB, want under 100 MB"
done
[ "$(peaks | wc -l)" = 2 ] || fail "no peak memory measured: $(cat "$WORK/launch.out")"
echo "ok: peak memory per rank over 1,000 communicators: $(peaks | tr '\n' ' ')KB"
echo "ok: churned communicators reuse slots; a stall on the 200th is reported; 1,000 leave no false report"

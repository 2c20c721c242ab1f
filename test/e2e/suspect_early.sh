#!/bin/bash
# Early suspicion at the default 60 s timeout: a wait past max(20 x the communicator's p99 gap between completions,
# 5 s) is reported as suspected (a line, a report event, the live collector's ncclwatch_comm_suspected) with the
# verdict the stall would have, long before the stall.
#   A. 4 ranks, 20 ms per all_reduce: a 3 s pause of every rank (nothing outstanding) is not suspected and is no gap;
#      rank 1 then sleeps 7 s before step 80 (a real wait): suspected within 10 s, then "recovered"; rank 2 then skips
#      the all_reduce of step 150: the others' wait in #200 is suspected NOT_JOINED rank 2 within 10 s, the verdict
#      `analyze` gives the stall, and the live collector shows it; the job is killed then.
#   B. 2 ranks, a slow but steady loop (300 ms per all_reduce): one 5.5 s wait, past the 5 s floor but short of
#      20 x its p99, is not suspected.
#   C. 4 ranks, rank 3 never enters the init: with no rhythm yet, the others' init is suspected INIT_HANG rank 3 at
#      8 s (kInitSuspectS; a rank never seen, the whole job on this host), long before the 60 s timeout.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
trap '[ -n "$SERVE_PID" ] && kill -KILL "$SERVE_PID" 2>/dev/null; cleanup' EXIT
export NCCLWATCH_TIMEOUT_SEC=60 NCCLWATCH_DIGEST_MS=50

events() { json_get "$1" "[(e['type'], e.get('verdicts', [{}])[0].get('kind') if e.get('verdicts') else None, e.get('verdicts', [{}])[0].get('seq') if e.get('verdicts') else None, round(e.get('stalled_for_s', 0), 1)) for e in d['events']]"; }
has_event() { [ -f "$1" ] && json_get "$1" "any($2 for e in d['events'])" | grep -q True; }
# The first event of file $1 that matches $2, field expression $3 of it.
event_get() { json_get "$1" "[e for e in d['events'] if $2][0]$3"; }

# ---- A ----
mkdir -p "$WORK/live"
"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 60 --out "$WORK/live" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")
MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")

export NCCLWATCH_COLLECTOR="127.0.0.1:$PORT" FAKE_NCCL_OP_DELAY_US=20000
launch_job 4 --steps 200 --count 4096 --pause-step 40 --pause-ms 3000 --sleep-rank 1 --sleep-step 80 \
    --sleep-ms 7000 --skip-rank 2 --skip-step 150 --hold-ms 60000

is_sleep_suspicion="e['type'] == 'suspected' and e['verdicts'] and e['verdicts'][0]['seq'] == 81"
is_sleep_recovery="e['type'] == 'recovered' and e['suspected_only']"
is_skip_suspicion="e['type'] == 'suspected' and e['verdicts'] and e['verdicts'][0]['seq'] == 200"
wait_for 60 has_files '*.report.json' 3 || fail "no report from the ranks that wait for rank 1"
for r in 0 2 3; do
    f=$(ls "$(job_dir)"/rank$r-*.report.json)
    wait_for 20 has_event "$f" "$is_sleep_recovery" || fail "rank $r: no recovery after rank 1's 7 s sleep: $(events "$f")"
    # Nothing before the real wait: the 3 s pause with nothing outstanding is not suspected.
    first=$(json_get "$f" "d['events'][0]['type'] + ' ' + str(d['events'][0]['verdicts'][0]['seq'])")
    [ "$first" = "suspected 81" ] || fail "rank $r: the first event is '$first', want the suspicion at #81: $(events "$f")"
    kind=$(event_get "$f" "$is_sleep_suspicion" "['verdicts'][0]['kind']")
    culprits=$(event_get "$f" "$is_sleep_suspicion" "['verdicts'][0]['culprits']")
    waited=$(event_get "$f" "$is_sleep_suspicion" "['stalled_for_s']")
    p99=$(event_get "$f" "$is_sleep_suspicion" "['completion_gap_p99_s']")
    [ "$kind $culprits" = "NOT_JOINED [1]" ] || fail "rank $r: suspected $kind $culprits at #81, want NOT_JOINED [1]"
    "$PY" -c "import sys; sys.exit(0 if 5.0 <= $waited < 7.0 else 1)" ||
        fail "rank $r: suspected after $waited s, want 5 s (the floor) to 7 s (the end of the wait)"
    # The 3 s pause is no gap: the baseline stayed at the loop's rhythm (with it, the threshold would be 60 s).
    "$PY" -c "import sys; sys.exit(0 if 0 < $p99 < 0.25 else 1)" || fail "rank $r: baseline p99 $p99 s, want < 0.25 s"
    [ "$(event_get "$f" "$is_sleep_suspicion" "['verdicts'][0]['suspected']")" = True ] ||
        fail "rank $r: the suspected verdict is not labelled suspected"
    rwaited=$(event_get "$f" "$is_sleep_recovery" "['stalled_for_s']")
    "$PY" -c "import sys; sys.exit(0 if 6.5 <= $rwaited <= 9.0 else 1)" || fail "rank $r: recovered after $rwaited s"
done
grep -q "SUSPECTED NOT_JOINED: rank 1 (.*) never issued AllReduce #81 on communicator .*NCCLWATCH_TIMEOUT_SEC=60" \
    "$WORK/launch.err" || fail "no one-line suspicion naming rank 1 on stderr"
grep -q "RECOVERED: communicator .* made progress again after .* s (suspected, never a stall)" "$WORK/launch.err" ||
    fail "no RECOVERED line for the suspicion"
echo "ok: the 3 s pause was not suspected; rank 1's 7 s sleep was suspected NOT_JOINED and recovered"

# The skip: suspected within 10 s of the wait, NOT_JOINED rank 2 at #200.
for r in 0 1 3; do
    f=$(ls "$(job_dir)"/rank$r-*.report.json)
    wait_for 30 has_event "$f" "$is_skip_suspicion" || fail "rank $r: the wait in #200 was not suspected: $(events "$f")"
    kind=$(event_get "$f" "$is_skip_suspicion" "['verdicts'][0]['kind']")
    culprits=$(event_get "$f" "$is_skip_suspicion" "['verdicts'][0]['culprits']")
    waited=$(event_get "$f" "$is_skip_suspicion" "['stalled_for_s']")
    [ "$kind $culprits" = "NOT_JOINED [2]" ] || fail "rank $r: suspected $kind $culprits at #200, want NOT_JOINED [2]"
    "$PY" -c "import sys; sys.exit(0 if 5.0 <= $waited < 10.0 else 1)" || fail "rank $r: suspected after $waited s"
    has_event "$f" "e['type'] == 'stall'" && fail "rank $r: a stall report before the 60 s timeout"
done
grep -q "SUSPECTED NOT_JOINED: rank 2 (.*) never issued AllReduce #200" "$WORK/launch.err" ||
    fail "no one-line suspicion naming rank 2 on stderr"
# The verdict the stall has: analyze now, with a timeout the wait has passed, names the same.
"$NCW_COLLECTOR" analyze --json --timeout 1 "$(job_dir)" >"$WORK/stall.json"
stall=$(json_get "$WORK/stall.json" "(d['verdicts'][0]['kind'], [c['comm_rank'] for c in d['verdicts'][0]['culprits']], d['verdicts'][0]['seq'])")
[ "$stall" = "('NOT_JOINED', [2], 200)" ] || fail "analyze's stall verdict is $stall, want the suspected one"
# And analyze at the 60 s timeout judges the suspicion the same way, from the baselines in the rank files.
"$NCW_COLLECTOR" analyze --json --timeout 60 "$(job_dir)" >"$WORK/suspect.json"
sus=$(json_get "$WORK/suspect.json" "(d['problem_found'], d['suspected'][0]['kind'], [c['comm_rank'] for c in d['suspected'][0]['culprits']], d['suspected'][0]['seq'])")
[ "$sus" = "(False, 'NOT_JOINED', [2], 200)" ] || fail "analyze --timeout 60: $sus, want the suspicion of rank 2 at #200"
json_get "$WORK/suspect.json" "all(0 < r['completion_gap_p99_ns'] < 250000000 for c in d['comms'] for r in c['ranks'])" |
    grep -q True || fail "analyze --json does not show every rank's baseline"
"$NCW_COLLECTOR" analyze --timeout 60 "$(job_dir)" | grep -q "SUSPECTED NOT_JOINED: rank 2" ||
    fail "the text report does not list the suspicion"
# The live collector judges it from the digests.
suspected_metric() { metrics | grep -q '^ncclwatch_comm_suspected{.*rank="0".*} 1$'; }
wait_for 15 suspected_metric || fail "/metrics: $(metrics | grep -e suspected -e gap_p99)"
metrics | grep -q '^ncclwatch_completion_gap_p99_seconds{.*rank="3".*} 0\.' ||
    fail "/metrics has no baseline for rank 3: $(metrics | grep gap_p99)"
grep -q "SUSPECTED NOT_JOINED" "$WORK/serve.out" "$WORK/serve.err" || fail "the live collector did not log the suspicion"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
echo "ok: the wait in #200 was suspected NOT_JOINED rank 2 within 10 s, as analyze's stall verdict; /metrics says so"

# ---- B ----
rm -rf "$NCCLWATCH_DIR"
unset NCCLWATCH_COLLECTOR
export FAKE_NCCL_OP_DELAY_US=300000
run_job 2 --steps 32 --count 4096 --sleep-rank 1 --sleep-step 27 --sleep-ms 5500
[ "$JOB_RC" = 0 ] || fail "the slow job failed (exit $JOB_RC)"
has_files '*.report.json' 1 && fail "the slow but steady job was reported: $(cat "$(job_dir)"/*.report.json)"
grep -q SUSPECTED "$WORK/launch.err" && fail "the slow but steady job was suspected"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/slow.json"
json_get "$WORK/slow.json" "all(r['completion_gap_p99_ns'] >= 300000000 for c in d['comms'] for r in c['ranks'])" |
    grep -q True || fail "the slow job's baselines: $(json_get "$WORK/slow.json" "[r.get('completion_gap_p99_ns') for c in d['comms'] for r in c['ranks']]")"
echo "ok: a 5.5 s wait in a loop of 300 ms gaps (threshold 20 x p99 > 6 s) was not suspected"

# ---- C ----
rm -rf "$NCCLWATCH_DIR"
unset FAKE_NCCL_OP_DELAY_US
is_init_suspicion="e['type'] == 'suspected' and e.get('init') and e['verdicts']"
launch_job 4 --steps 2 --no-init-rank 3 --hold-ms 20000
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "init: no report from rank 0 within 30 s"
f=$(ls "$(job_dir)"/rank0-*.report.json)
wait_for 10 has_event "$f" "$is_init_suspicion" || fail "init: rank 0's init was not suspected: $(events "$f")"
kind=$(event_get "$f" "$is_init_suspicion" "['verdicts'][0]['kind']")
culprits=$(event_get "$f" "$is_init_suspicion" "['verdicts'][0]['culprits']")
waited=$(event_get "$f" "$is_init_suspicion" "['stalled_for_s']")
[ "$kind $culprits" = "INIT_HANG [3]" ] || fail "init: suspected $kind $culprits, want INIT_HANG [3]"
[ "$(event_get "$f" "$is_init_suspicion" "['verdicts'][0]['suspected']")" = True ] ||
    fail "init: the suspected verdict is not labelled suspected"
"$PY" -c "import sys; sys.exit(0 if 8.0 <= $waited < 12.0 else 1)" || fail "init: suspected after $waited s, want 8 to 12 s"
has_event "$f" "e['type'] == 'init_hang'" && fail "init: an init_hang report before the 60 s timeout"
wait_for 10 grep -q "SUSPECTED INIT_HANG: .*NCCLWATCH_TIMEOUT_SEC=60" "$WORK/launch.err" || fail "init: no one-line suspicion on stderr"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
echo "ok: an init that rank 3 never entered was suspected INIT_HANG rank 3 after $waited s (timeout 60 s)"

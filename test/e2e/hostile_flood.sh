#!/bin/bash
# Attack test (issue items 2, 4 and 9): `ncclwatch-collector serve` under a flood of unauthenticated clients on
# loopback. Every check below states the right answer (the collector's bounds: serve --help, "Limits").
#
# Phase A, a collector without a token:
#   1. 1,000 slow clients: Hello, then a Digest header announcing 1 MiB and 1 MiB - 1 byte of it, then nothing;
#      at the same time 4,096 Hellos, each a distinct fake job, sent as fast as one Python process can.
#      RIGHT ANSWER: the collector's peak RSS (VmHWM) stays under 200 MB, and every slow connection is closed by the
#      server within 15 s.
#      Why 200 MB: an idle collector is ~4 MB; the state of 4,096 fake Hellos and 1,000 connections is a few MB.
#      What does not fit is the ~1 GB of never-finished frames (today each partial frame sits in its connection's
#      buffer, ~1.2 MB each), so the bound holds only if partial frames have a deadline AND the bytes buffered for
#      incomplete frames have a global budget (a deadline alone still lets the peak reach 1 GB before it fires).
#   2. Then a real 4-rank job under the shim whose rank 2 skips step 5's all_reduce.
#      RIGHT ANSWER: the flood does not lock real ranks out (no "collector full" Reject to them) and the hang is
#      reported live: live-report.json within 30 s, first verdict NOT_JOINED with culprits [2].
# Phase B, a collector with NCCLWATCH_TOKEN:
#   3. 4,096 junk connections (each a distinct bad magic, i.e. a distinct "reason"), then one client with a wrong
#      token. RIGHT ANSWER: the wrong-token client is still logged ("wrong token" in the collector's log): junk must
#      not exhaust the budget that keeps security-relevant refusals visible.
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK (as for every e2e test). Bounded: ~90 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
RSS_BOUND_KB=$((200 * 1000))
SLOW=1000
FLOOD=4096
JUNK=4096
SERVE_PID=""
BG_PIDS=""
stop_bg() {
    local p
    for p in $BG_PIDS; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BG_PIDS=""
}
trap 'stop_bg; stop_job; stop_serve; cleanup' EXIT

# start_serve NAME: a collector writing into $WORK/NAME; sets PORT and MPORT.
start_serve() { serve_into "$1" --timeout 3 --dead-after 3; }
hwm_kb() { "$PY" "$HC" rss --pid "$SERVE_PID" | "$PY" -c "import json,sys; print(json.load(sys.stdin).get('vmhwm_kb', 0))"; }

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30

# ---- Phase A ----
start_serve flood
echo "idle collector: VmHWM $(hwm_kb) kB"
timeout 60 "$PY" "$HC" --max-seconds 55 slowloris --port "$PORT" --count $SLOW --after-hello --job slowloris \
    --announce 1048576 --fill 1048575 --wait 15 >"$WORK/slow.json" 2>"$WORK/slow.err" &
BG_PIDS="$!"
SLOW_PID=$!
timeout 30 "$PY" "$HC" --max-seconds 25 hello-flood --port "$PORT" --count $FLOOD --wait 3 >"$WORK/flood.json" \
    2>"$WORK/flood.err" || check_fail "hello-flood did not run: $(cat "$WORK/flood.err")"
echo "hello-flood: $(cat "$WORK/flood.json")"
wait "$SLOW_PID"
BG_PIDS=""
echo "slowloris: $(cat "$WORK/slow.json")"
[ -s "$WORK/slow.json" ] || check_fail "slowloris did not run: $(cat "$WORK/slow.err")"
hwm=$(hwm_kb)
echo "collector under attack: VmHWM $hwm kB (bound $RSS_BOUND_KB kB)"
[ "$hwm" -lt "$RSS_BOUND_KB" ] || check_fail "peak RSS $hwm kB >= $RSS_BOUND_KB kB under $SLOW slow 1 MiB frames + $FLOOD Hellos"
if [ -s "$WORK/slow.json" ]; then
    open=$(field "$WORK/slow.json" "d['still_open']")
    closed=$(field "$WORK/slow.json" "d['closed_by_server']")
    [ "$open" = 0 ] || check_fail "$open of $SLOW slow connections still open after 15 s ($closed closed by the server)"
fi

# The real job, after the flood.
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
report() { ls "$WORK"/flood/*/live-report.json 2>/dev/null | grep -v '/flood-[0-9]*/' | grep -v /slowloris/ | head -1; }
has_report() { [ -n "$(report)" ]; }
if wait_for 30 has_report; then
    r=$(report)
    k=$(json_get "$r" "d['verdicts'][0]['kind']")
    c=$(json_get "$r" "d['verdicts'][0]['culprits']")
    echo "real job reported live: $k culprits $c"
    [ "$k" = NOT_JOINED ] && [ "$c" = "[2]" ] || check_fail "wrong live verdict after the flood: $k $c"
else
    check_fail "the real hang was not reported live within 30 s of the launch"
fi
nfull=$(grep -c "collector full" "$WORK/launch.err" 2>/dev/null)
echo "real ranks told 'collector full': ${nfull:-0} log line(s)"
[ "${nfull:-0}" = 0 ] || check_fail "real ranks were refused: $(grep -m1 "collector full" "$WORK/launch.err")"
stop_job
stop_serve

# ---- Phase B ----
export NCCLWATCH_TOKEN="flood-token-$$"
start_serve junk
timeout 40 "$PY" "$HC" --max-seconds 35 junk --port "$PORT" --count $JUNK --wait 8 >"$WORK/junk.json" \
    2>"$WORK/junk.err" || check_fail "junk did not run: $(cat "$WORK/junk.err")"
echo "junk: $(cat "$WORK/junk.json")"
echo "collector log lines after the junk: $(wc -l <"$WORK/junk.err")"
timeout 20 "$PY" "$HC" --max-seconds 15 hello-flood --port "$PORT" --count 1 --job wrong-token-job --token "not-it" \
    --wait 3 >"$WORK/wrong.json" 2>&1
echo "wrong-token client: $(cat "$WORK/wrong.json")"
wrong_logged() { grep -q "wrong token" "$WORK/junk.err"; }
wait_for 5 wrong_logged || check_fail "the wrong-token client after $JUNK junk connections was not logged (last log line: $(tail -1 "$WORK/junk.err"))"
unset NCCLWATCH_TOKEN
stop_serve

checks_done "ok: flood, slowloris and junk bounded; the real hang reported live; the wrong-token client logged"

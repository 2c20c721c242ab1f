#!/bin/bash
# A live collector restarted during a stall (issue 45, point 4): `serve` is SIGKILLed while rank 2 of 4 holds an
# all_reduce up, and restarted on the same port after the ranks' reconnect backoffs have grown apart, so that they come
# back one by one over seconds. On b3c73f4 its first report named 2-3 innocent ranks and asked every rank for dumps,
# before the ranks had reconnected (3 of 3 runs): the ranks back first were judged against ranks not heard from yet.
# RIGHT ANSWER: the restarted collector sees that the ranks were reporting to a collector before (protocol 1.15: a
# Hello says it is a reconnection), says "collector restarted ..., waiting for N ranks" while some are missing, names
# nobody until every rank is back (or 32 s), and then names rank 2 alone.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
trap 'stop_serve; cleanup' EXIT
# The shims' own watchdogs stay quiet (30 s): the collector's report is the one under test. Debug level shows each
# rank's failed reconnect attempts, which the restart waits for.
export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30 NCCLWATCH_LOG_LEVEL=debug
serve_into first --timeout 2 --dead-after 2
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 120000
wait_for 30 has_report first || fail "no live report before the restart: $(cat "$WORK/first.err")"
[ "$(json_get "$(report_of first)" "d['verdicts'][0]['culprits']")" = "[2]" ] ||
    fail "before the restart: $(json_get "$(report_of first)" "d['verdicts'][0]")"
port=$PORT
stop_serve
# Each rank has failed to reconnect three times: the next attempts are 2-4 s apart at random, one rank from another.
retried() {
    local i
    for i in 0 1 2 3; do
        [ "$(grep -c "r$i\] .*live collector at 127.0.0.1:$port still unreachable" "$WORK/launch.err")" -ge 3 ] || return 1
    done
}
wait_for 40 retried || fail "the ranks did not retry: $(grep -c "still unreachable" "$WORK/launch.err") attempts logged"
serve_into second --port "$port" --timeout 2 --dead-after 2
wait_for 40 has_report second || fail "no live report after the restart: $(cat "$WORK/second.out")"
# The first report after the restart (serve prints each on stdout) names rank 2, and only it, with every rank back.
first=$(grep -m1 -A1 "^ncclwatch live report" "$WORK/second.out" | tail -1)
echo "$first" | grep -q "^NOT_JOINED: rank 2 (.*; 3 ranks wait in it" || fail "the restarted collector's first verdict: $first
$(cat "$WORK/second.out" "$WORK/second.err")"
[ "$(json_get "$(report_of second)" "d['verdicts'][0]['culprits']")" = "[2]" ] ||
    fail "after the restart: $(json_get "$(report_of second)" "d['verdicts'][0]")"
# Said while it waited (on stderr, with the collector's news), when the ranks came back apart, and before any report.
if grep -q "collector restarted" "$WORK/second.err"; then
    grep -q "waiting for [0-9]* ranks to come back before naming anyone" "$WORK/second.err" ||
        fail "the wait is not said as it should be: $(grep "collector restarted" "$WORK/second.err")"
    w=$(grep -n -m1 "collector restarted" "$WORK/second.err" | cut -d: -f1)
    v=$(grep -n -m1 "report written" "$WORK/second.err" | cut -d: -f1)
    [ "$w" -lt "${v:-999999}" ] || fail "a report came before the wait was said: $(cat "$WORK/second.err")"
fi
stop_job
echo "ok: after a restart the collector waits for the ranks and names rank 2: $first"
grep -h "collector restarted\|are back\|did not come back" "$WORK/second.err"

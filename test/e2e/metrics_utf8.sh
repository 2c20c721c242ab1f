#!/bin/bash
# Attack test (issue item 6): job ids and hosts that are not UTF-8 must not break /metrics for everyone. Every check
# states the right answer.
#
# Fake ranks (no token, as any client on the network can) say Hello with raw-byte job ids and hosts: a lone 0xff,
# a bad continuation (c3 28), a UTF-16 surrogate (ed a0 80), an overlong '/' (c0 af), and quote, backslash, newline
# and CR; each sends one Digest, so each has /metrics series.
# RIGHT ANSWER: the scrape is valid UTF-8 and `promtool check metrics` accepts it (exit 0), and the fake ranks' series
# are in it (their labels sanitised, not the series dropped: that would let a client hide from monitoring).
# Control first: the same collector's scrape before the fake ranks passes promtool.
# Skipped (exit 77) when promtool is not installed.
#
# Environment: NCW_COLLECTOR. Bounded: ~20 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
PROMTOOL=${PROMTOOL:-$(command -v promtool)}
[ -n "$PROMTOOL" ] && [ -x "$PROMTOOL" ] || { echo "SKIP: promtool not installed (set PROMTOOL or install prometheus' promtool)"; exit 77; }
SERVE_PID=""
BG_PIDS=""
stop_serve() {
    [ -n "$SERVE_PID" ] && kill -KILL "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    SERVE_PID=""
}
stop_bg() {
    local p
    for p in $BG_PIDS; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BG_PIDS=""
}
trap 'stop_bg; stop_serve; cleanup' EXIT

mkdir -p "$WORK/out"
"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 30 --out "$WORK/out" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")
MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")

# Control: a clean scrape passes promtool (so a failure below is the bytes' doing, not the lint's). Two ranks of a job
# are two processes (the collector takes one rank a process, issue 45).
for r in 0 1; do
    timeout 20 "$PY" "$HC" --max-seconds 15 fake-ranks --port "$PORT" --count 1 --rank0 $r --nranks 2 --world 2 \
        --job clean-job --hold 1 >/dev/null &
    BG_PIDS="$BG_PIDS $!"
done
for p in $BG_PIDS; do wait "$p"; done
BG_PIDS=""
timeout 20 "$PY" "$HC" --max-seconds 15 scrape --metrics-port "$MPORT" --save "$WORK/clean.prom" >"$WORK/clean.json"
"$PROMTOOL" check metrics <"$WORK/clean.prom" >"$WORK/clean.promtool" 2>&1 ||
    fail "control: promtool rejects a clean scrape (the test cannot judge): $(head -3 "$WORK/clean.promtool")"

# job ids and hosts (hex): bad\xff_job / h\xc3(ost; sur\xed\xa0\x80job / over\xc0\xaflong; q"b\s\n\rjob / host\x01\t
JOBS=(626164ff5f6a6f62 737572eda0806a6f62 7122625c730a0d6a6f62)
HOSTS=(68c3286f7374 6f766572c0af6c6f6e67 686f7374010974)
for i in 0 1 2; do
    for r in 0 1; do
        timeout 30 "$PY" "$HC" --max-seconds 25 fake-ranks --port "$PORT" --count 1 --rank0 $r --nranks 2 --world 2 \
            --job-hex "${JOBS[$i]}" --host-bytes "${HOSTS[$i]}" --hold 5 >"$WORK/fake$i-$r.json" 2>&1 &
        BG_PIDS="$BG_PIDS $!"
    done
done
ranks_in() { "$PY" "$HC" scrape --metrics-port "$MPORT" --save "$WORK/m.prom" >/dev/null 2>&1 && grep -q '^ncclwatch_collector_ranks 8$' "$WORK/m.prom"; }
wait_for 10 ranks_in || check_fail "the 6 fake ranks did not all register: $(grep collector_ranks "$WORK/m.prom")"
timeout 20 "$PY" "$HC" --max-seconds 15 scrape --metrics-port "$MPORT" --save "$WORK/bad.prom" >"$WORK/bad.json"
echo "scrape with the fake ranks: $(cat "$WORK/bad.json")"
[ "$(json_get "$WORK/bad.json" "d['utf8']")" = True ] || check_fail "the /metrics body is not valid UTF-8"
"$PROMTOOL" check metrics <"$WORK/bad.prom" >"$WORK/bad.promtool" 2>&1
prc=$?
echo "promtool check metrics: exit $prc $(head -3 "$WORK/bad.promtool")"
[ "$prc" = 0 ] || check_fail "promtool rejects the scrape: $(head -3 "$WORK/bad.promtool")"
series=$(grep -c '^ncclwatch_coll_issued_total{' "$WORK/bad.prom")
echo "ncclwatch_coll_issued_total series: $series (8 expected: 2 clean + 6 fake)"
[ "$series" = 8 ] || check_fail "$series coll_issued series, not 8: the fake ranks' series were dropped or lost"
for p in $BG_PIDS; do wait "$p"; done
BG_PIDS=""
for i in 0 1 2; do for r in 0 1; do echo "fake-ranks $i rank $r: $(cat "$WORK/fake$i-$r.json")"; done; done

checks_done "ok: /metrics stays valid (promtool) with non-UTF-8 job ids and hosts"

#!/bin/bash
# Attack test (issue item 4, the /metrics part): /metrics must be bounded in size and in the memory its responses pin.
# Every check states the right answer (serve --metrics-max-bytes, --metrics-budget, --scrape-timeout).
#
# 1,000 fake ranks of one job, each a Hello and one Digest of 64 communicators (the protocol's per-Digest maximum),
# held open. From one process: with a token (without one the collector takes one rank a process, issue 45). Then:
#   1. One scrape. RIGHT ANSWER: the response is under 16 MiB (16,777,216 bytes).
#      Why 16 MiB: a real 1,000-rank job with ~8 communicators per rank is ~64,000 series x ~170 bytes ~ 11 MB, so
#      16 MiB leaves room for honest large jobs while stopping one client from making every scrape 60 MB (the
#      collector should cap series per job / per scrape, or aggregate, and say so in a metric).
#   2. 30 clients that send GET /metrics and never read, held 20 s. RIGHT ANSWER: the collector's peak RSS (VmHWM)
#      stays under 256 MB. Why: the 1,000 ranks' state is ~64 MB here, one uncapped 63 MB render peaks at
#      ~250 MB, one capped (16 MiB) render needs ~50 MB more; what does not fit is 30 whole responses
#      queued in user space (the per-connection output cap applies to ranks only, not to HTTP). A bounded collector
#      caps the bytes queued for scrapers in total (or renders per scraper lazily, or drops a scraper that has not
#      read within a few seconds).
#   3. After them, a normal scrape still answers within 10 s.
#
# Environment: NCW_COLLECTOR. Bounded: ~90 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
CAP_BYTES=$((16 * 1024 * 1024))
RSS_BOUND_KB=$((256 * 1000))
RANKS=1000
COMMS=64
SCRAPERS=30
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
hwm_kb() { "$PY" "$HC" rss --pid "$SERVE_PID" | "$PY" -c "import json,sys; print(json.load(sys.stdin).get('vmhwm_kb', 0))"; }

mkdir -p "$WORK/out"
TOKEN="metrics-cap-$$"
NCCLWATCH_TOKEN=$TOKEN "$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 600 \
    --out "$WORK/out" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")
MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")

timeout 100 "$PY" "$HC" --max-seconds 95 fake-ranks --port "$PORT" --count $RANKS --comms $COMMS --job fat-job \
    --token "$TOKEN" --hold 75 >"$WORK/fake.json" 2>"$WORK/fake.err" &
BG_PIDS="$!"
sleep 5  # (informational: the ranks' state alone, before any scrape renders)
echo "collector with the fake ranks, no scrape yet: $("$PY" "$HC" rss --pid "$SERVE_PID")"
registered() {
    timeout 20 "$PY" "$HC" --max-seconds 15 scrape --metrics-port "$MPORT" --save "$WORK/m.prom" >"$WORK/scrape.json" 2>&1 &&
        grep -q "^ncclwatch_collector_ranks $RANKS\$" "$WORK/m.prom" &&
        [ "$(grep -c '^ncclwatch_coll_issued_total{' "$WORK/m.prom")" -ge $((RANKS * COMMS)) ]
}
wait_for 40 registered || check_fail "the fake ranks did not all register: $(grep collector_ranks "$WORK/m.prom")"
echo "scrape with $RANKS ranks x $COMMS comms: $(cat "$WORK/scrape.json")"
bytes=$(json_get "$WORK/scrape.json" "d['bytes']")
[ "$bytes" -lt "$CAP_BYTES" ] || check_fail "one /metrics response is $bytes bytes (cap $CAP_BYTES)"
before=$(hwm_kb)
echo "collector after the first scrape(s), before the non-reading scrapers: VmHWM $before kB"

timeout 40 "$PY" "$HC" --max-seconds 35 scrape --metrics-port "$MPORT" --no-read --count $SCRAPERS --hold 20 \
    >"$WORK/noread.json" 2>&1
echo "non-reading scrapers: $(cat "$WORK/noread.json")"
hwm=$(hwm_kb)
echo "collector after $SCRAPERS non-reading scrapers: VmHWM $hwm kB (bound $RSS_BOUND_KB kB)"
[ "$hwm" -lt "$RSS_BOUND_KB" ] || check_fail "peak RSS $hwm kB >= $RSS_BOUND_KB kB with $SCRAPERS scrapers that never read"
t0=$(date +%s%N)
timeout 15 "$PY" "$HC" --max-seconds 12 scrape --metrics-port "$MPORT" --timeout 10 >"$WORK/after.json" 2>&1 ||
    check_fail "no /metrics answer within 10 s after the scrapers: $(cat "$WORK/after.json")"
echo "scrape after: $(cat "$WORK/after.json") ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
stop_bg

checks_done "ok: /metrics bounded in size and in memory under non-reading scrapers"

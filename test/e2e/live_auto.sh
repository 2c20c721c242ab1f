#!/bin/bash
# NCCLWATCH_COLLECTOR=auto: global rank 0 runs the live collector on MASTER_ADDR:MASTER_PORT+1 inside its shim and
# every rank streams digests to it. Rank 2 of 4 skips an all_reduce: the in-shim collector writes the live report
# naming rank 2 into the job folder and asks every rank for a dump.
# Rank 0 starts 1.5 s after the others (--init-late-rank 0): the others' first attempts find nothing listening yet.
# RIGHT ANSWER: no rank prints a "Connection refused" (or any "cannot reach the live collector") warning: before rank
# 0's collector is up, a refused attempt is expected and retried quietly; every rank connects once it is up.
# The collector serves /metrics on MASTER_PORT+2 (the port after the collector's): the stall is there, in Prometheus text
# (promtool check metrics, where promtool is installed) and, when asked for, in OpenMetrics.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
# Where the collector listens, each rank's connection and the dump requests are said at debug level (quiet by
# default); the full prefix carries the level, so a warning is told from the quiet retries debug level shows.
export NCCLWATCH_LOG_LEVEL=debug NCCLWATCH_LOG_FORMAT=full
# The siblings' watchdogs would name rank 2 too; the live collector's report is the one under test.
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000 --init-late-rank 0 --init-late-ms 1500

wait_for 30 auto_listening || fail "rank 0 started no collector"
connected() { [ "$(grep -c "sending live digests to the collector at 127.0.0.1:" "$WORK/launch.err")" = 4 ]; }
wait_for 20 connected || fail "not every rank connected: $(grep -c "sending live digests" "$WORK/launch.err") of 4"
if grep -E "\] (warning|error): .*(Connection refused|cannot reach the live collector)" "$WORK/launch.err"; then
    fail "a rank warned that rank 0's collector was not up yet (above)"
fi
wait_for 30 test -s "$(job_dir)/live-report.txt" || fail "no live report in the job folder"
grep -q "rank 2" "$(job_dir)/live-report.txt" || fail "the live report does not name rank 2: $(cat "$(job_dir)/live-report.txt")"
# Every rank (the three waiting ones and rank 2) writes its dump when the collector asks.
wait_for 20 has_files '*.dump.json' 4 || fail "not every rank wrote a dump: $(ls "$(job_dir)")"
grep -q "live collector asks for a dump" "$WORK/launch.err" || fail "no rank logged the collector's dump request"

# /metrics of the collector in rank 0.
MPORT=$(sed -n 's/.*\/metrics on http:\/\/127.0.0.1:\([0-9]*\)\/metrics.*/\1/p' "$WORK/launch.err" | head -1)
[ -n "$MPORT" ] || fail "rank 0's collector names no /metrics: $(grep "live collector listening" "$WORK/launch.err")"
# scrape FILE [ACCEPT]: the response's head and body, "HTTP_STATUS CONTENT_TYPE" first.
scrape() {
    "$PY" - "$MPORT" "$1" "${2:-}" <<'PY'
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/metrics" % sys.argv[1])
if sys.argv[3]:
    req.add_header("Accept", sys.argv[3])
with urllib.request.urlopen(req, timeout=5) as r:
    open(sys.argv[2], "wb").write(r.read())
    print(r.status, r.headers.get("Content-Type"))
PY
}
culprit_shown() { scrape "$WORK/m.prom" >/dev/null && grep -q '^ncclwatch_culprit{.*rank="2".*} 1$' "$WORK/m.prom"; }
wait_for 10 culprit_shown || fail "/metrics does not flag rank 2: $(grep culprit "$WORK/m.prom")"
grep -q '^ncclwatch_verdict{job_id=".*",comm=".*",kind="NOT_JOINED"} 1$' "$WORK/m.prom" ||
    fail "/metrics has no NOT_JOINED verdict: $(grep verdict "$WORK/m.prom")"
grep -q "^ncclwatch_build_info{version=\"$NCW_VERSION\",revision=\"[0-9a-z]*\"} 1$" "$WORK/m.prom" ||
    fail "/metrics: $(grep build_info "$WORK/m.prom")"
grep -q '^ncclwatch_coll_issued_total{job_id=".*",rank="0",Hostname=' "$WORK/m.prom" || fail "/metrics: no per-rank counters"
! grep -q 'pid=' "$WORK/m.prom" || fail "/metrics has a pid label"
PROMTOOL=${PROMTOOL:-$(command -v promtool)}
if [ -n "$PROMTOOL" ]; then
    "$PROMTOOL" check metrics <"$WORK/m.prom" >"$WORK/promtool.out" 2>&1 ||
        fail "promtool check metrics rejects auto's /metrics: $(head -5 "$WORK/promtool.out")"
else
    echo "note: promtool not installed: the Prometheus text is not linted"
fi
head=$(scrape "$WORK/m.om" "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
[ "$head" = "200 application/openmetrics-text; version=1.0.0; charset=utf-8" ] || fail "OpenMetrics asked for: $head"
[ "$(tail -1 "$WORK/m.om")" = "# EOF" ] || fail "the OpenMetrics body does not end with # EOF: $(tail -2 "$WORK/m.om")"
grep -q '^# TYPE ncclwatch_coll_issued counter$' "$WORK/m.om" || fail "OpenMetrics: $(grep 'TYPE ncclwatch_coll_issued' "$WORK/m.om")"
grep -q '^# TYPE ncclwatch_build info$' "$WORK/m.om" || fail "OpenMetrics: $(grep 'TYPE ncclwatch_build' "$WORK/m.om")"
if [ -n "$PROMTOOL" ]; then
    # Prometheus's own OpenMetrics parser (its backfill reads OpenMetrics; it wants a timestamp on every sample).
    sed '/^#/!s/$/ 1700000000/' "$WORK/m.om" >"$WORK/m.ts.om"
    "$PROMTOOL" tsdb create-blocks-from openmetrics "$WORK/m.ts.om" "$WORK/om-blocks" >"$WORK/om.out" 2>&1 ||
        fail "Prometheus's OpenMetrics parser rejects the body: $(tail -3 "$WORK/om.out")"
fi

# NCCLWATCH_METRICS_PORT: /metrics on that port instead of the one after the collector's.
stop_job
rm -rf "$NCCLWATCH_DIR"
MPORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export NCCLWATCH_METRICS_PORT=$MPORT
touch "$WORK/go"
launch_job 2 --steps 3 --wait-gone "$WORK/go"
wait_for 30 grep -q "/metrics on http://127.0.0.1:$MPORT/metrics" "$WORK/launch.err" ||
    fail "NCCLWATCH_METRICS_PORT=$MPORT: rank 0's collector says $(grep "live collector listening" "$WORK/launch.err")"
build_shown() { scrape "$WORK/m2.prom" >/dev/null && grep -q '^ncclwatch_build_info{' "$WORK/m2.prom"; }
wait_for 10 build_shown || fail "nothing answers /metrics on NCCLWATCH_METRICS_PORT=$MPORT"
rm -f "$WORK/go"
wait "$LAUNCH_PID"
LAUNCH_PID=""
unset NCCLWATCH_METRICS_PORT
echo "ok: the in-shim collector of rank 0 named rank 2, collected every rank's dump, served /metrics (and on NCCLWATCH_METRICS_PORT); no rank warned at start-up"

#!/bin/bash
# `ncclwatch-collector serve` with fake-NCCL jobs whose shims stream digests to it (NCCLWATCH_COLLECTOR=HOST:PORT):
#   1. rank 2 of 4 skips an all_reduce: the live report names it NOT_JOINED, every rank writes its dump, /metrics shows
#      the stall;
#   2. rank 1 of 3 is killed with SIGKILL: the live report names it DEAD;
#   3. the collector is killed and restarted: the ranks keep training and reconnect;
#   4. a client that sends garbage loses its connection; the ranks' connections stay.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
trap 'stop_serve; cleanup' EXIT

# start_serve NAME [PORT]: a collector writing into $WORK/NAME; sets PORT and MPORT.
start_serve() { serve_into "$1" --port "${2:-0}" --timeout 2 --dead-after 2; }

metric_is() { metrics | grep -q "^$1 $2\$"; }

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30  # the live collector's report is the one under test

# ---- 1. NOT_JOINED, live ----
start_serve skip
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 30 has_report skip || fail "no live report: $(cat "$WORK/skip.err")"
r=$(report_of skip)
[ "$(json_get "$r" "d['verdicts'][0]['kind']")" = NOT_JOINED ] || fail "verdict: $(json_get "$r" "d['verdicts'][0]")"
[ "$(json_get "$r" "d['verdicts'][0]['culprits']")" = "[2]" ] || fail "culprits: $(json_get "$r" "d['verdicts'][0]")"
txt=$(dirname "$r")/live-report.txt
sed -n 2p "$txt" | grep -q "^NOT_JOINED: rank 2 (.*) never issued AllReduce" || fail "the text report's first verdict line: $(head -3 "$txt")"
grep -q "NOT_JOINED" "$WORK/skip.out" || fail "no report on stdout"
wait_for 20 has_files '*.dump.json' 4 || fail "not every rank wrote its dump on the collector's request: $(ls "$(job_dir)")"
metrics | grep -q '^ncclwatch_culprit{.*rank="2".*} 1$' || fail "/metrics does not flag rank 2: $(metrics | grep culprit)"
metrics | grep -q '^ncclwatch_stalled{.*rank="0".*} 1$' || fail "/metrics does not show rank 0 waiting"
# Who holds the communicator up, for the stall alert to name: rank 2, its host, the op (docs/monitoring/alerts.yml).
host2=$(metrics | sed -n 's/^ncclwatch_culprit{.*rank="2",Hostname="\([^"]*\)".*} 1$/\1/p' | head -1)
[ -n "$host2" ] || fail "/metrics: no host for rank 2: $(metrics | grep '^ncclwatch_culprit{')"
metrics | grep -q "^ncclwatch_stall_culprit_info{job_id=\"[^\"]*\",comm=\"0x[0-9a-f]\{16\}\",kind=\"NOT_JOINED\",culprit_rank=\"2\",culprit_host=\"$host2\",op=\"AllReduce #[0-9]*\"} 1\$" ||
    fail "/metrics does not name rank 2 on $host2 in its AllReduce: $(metrics | grep stall_culprit)"
metric_is ncclwatch_collector_connections 4 || fail "/metrics: $(metrics | grep collector_connections)"
[ "$(grep -c "report written" "$WORK/skip.err")" = 1 ] || fail "the report was written more than once"
stop_job
stop_serve
rm -rf "$NCCLWATCH_DIR"

# ---- 2. SIGKILL: DEAD ----
start_serve kill
# Rank 1 lives a second first (asleep before step 3, below the collector's 2 s timeout): dying within milliseconds of
# its start, it could be gone before its digest thread said Hello, and a rank the collector never heard of is
# "not visible", not DEAD.
launch_job 3 --steps 10 --count 4096 --die-rank 1 --die-step 4 --sleep-rank 1 --sleep-step 3 --sleep-ms 1000 \
    --hold-ms 60000
dead_reported() { r=$(report_of kill) && [ -n "$r" ] && "$PY" -c "
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if any(v['kind'] == 'DEAD' and v['culprits'] == [1] for v in d['verdicts']) else 1)" "$r"; }
wait_for 30 dead_reported || fail "no DEAD verdict naming rank 1: $(cat "$(report_of kill)" 2>/dev/null | head -30)"
stop_job
stop_serve
rm -rf "$NCCLWATCH_DIR"

# ---- 3. The collector killed and restarted: training goes on, the ranks reconnect ----
start_serve restart
launch_job 4 --steps 100000000 --count 1024
wait_for 20 metric_is ncclwatch_collector_connections 4 || fail "the ranks did not connect"
issued() { "$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank0-*.ncw)" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['comms'][0]['coll_issued'])"; }
stop_serve
before=$(issued)
advanced() { [ "$(issued)" -gt "$((before + 100))" ]; }
wait_for 20 advanced || fail "rank 0 stopped training while the collector was gone ($before -> $(issued))"
start_serve restart2 "$PORT"
wait_for 30 metric_is ncclwatch_collector_connections 4 || fail "the ranks did not reconnect: $(metrics | grep collector_)"
kill -0 "$LAUNCH_PID" 2>/dev/null || fail "the job ended while the collector was away"

# ---- 4. Garbage from one client: that connection closed, the ranks' connections unaffected ----
"$PY" - "$PORT" <<'EOF' || fail "the collector did not close the garbage connection"
import socket, sys, os
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\n\r\n" + os.urandom(4096))
try:
    while s.recv(4096):
        pass
except ConnectionResetError:
    pass
EOF
wait_for 10 grep -q "closed connection from 127.0.0.1" "$WORK/restart2.err" || fail "the bad frame was not logged"
metric_is ncclwatch_collector_bad_frames_total 1 || fail "bad frames: $(metrics | grep bad_frames)"
metric_is ncclwatch_collector_connections 4 || fail "a rank lost its connection: $(metrics | grep collector_connections)"
before=$(issued)
wait_for 20 advanced || fail "training stopped after the garbage client"
stop_job
echo "ok: live NOT_JOINED and DEAD reports, dumps on request, reconnect after a collector restart, garbage refused"

#!/bin/bash
# Attack test (issue item 3): impersonating a live rank. Expected to FAIL until the collector is hardened; every check
# below states the right answer.
#
# A healthy 4-rank job under the shim streams to `ncclwatch-collector serve` (5 all_reduces, then all ranks hold
# 60 s, alive and idle: there is nothing to report). A client scrapes /metrics for the job id, host, world size,
# communicator id and comm rank of global rank 1, says Hello as rank 1 of that job (pid 31337, so a report that
# shows the fake is recognisable) and for 8 s sends Digests claiming rank 1 is stuck in an all_reduce for 2 minutes,
# reconnecting whenever it is dropped.
#   1. No token on the collector or the ranks.
#   2. NCCLWATCH_TOKEN on the collector and the ranks; the impostor knows the token (the token only says "may
#      talk to this collector", so any holder must be assumed) and the ids: with a token /metrics hides them by
#      default, so this collector runs with --metrics-ids, to give the impostor all it could learn elsewhere.
# RIGHT ANSWER, in both cases:
#   - the real rank 1 keeps its connection (its shim never logs "lost the live collector");
#   - the collector never lets the impostor's Hello take over the (job, rank 1) slot: /metrics never shows rank 1
#     with the impostor's claim, a collective no rank issued (a second Hello for a (job, rank) whose connection is
#     open and alive is refused or kept apart);
#   - no live report appears (the job is healthy), so none names pid 31337, and no rank is asked for a dump.
# Control (passes today): with the token required, an impostor without it is refused ("token refused").
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~60 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
SERVE_PID=""
trap 'stop_job; stop_serve; cleanup' EXIT

start_serve() {
    local name=$1
    shift
    serve_into "$name" --timeout 2 --dead-after 3 "$@"
}
connected_ranks() { metrics | grep -c '^ncclwatch_connected{.*} 1$'; }
four_connected() { [ "$(connected_ranks)" = 4 ] && metrics | grep -q '^ncclwatch_coll_completed_total{.*} 5$'; }

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30
export NCCLWATCH_LOG_LEVEL=debug  # a dump request is said at debug level: counted below

# attack NAME [--token T]: one healthy job, one impostor; records the failures.
attack() {
    local name=$1
    shift
    start_serve "$name" ${SERVE_ARGS:-}
    launch_job 4 --steps 5 --count 1024 --hold-ms 60000
    wait_for 20 four_connected || { check_fail "$name: the job did not connect: $(metrics | grep connected)"; stop_job; stop_serve; return; }
    sleep 1
    timeout 30 "$PY" "$HC" --max-seconds 25 impersonate --port "$PORT" --metrics-port "$MPORT" --rank 1 "$@" \
        --duration 8 --report-dir "$WORK/$name" --log "$WORK/launch.err" >"$WORK/$name.json" 2>"$WORK/$name.imp.err"
    echo "$name: impersonate: $(cat "$WORK/$name.json")"
    if [ ! -s "$WORK/$name.json" ]; then
        check_fail "$name: the impostor did not run: $(cat "$WORK/$name.imp.err")"
    else
        [ "$(field "$WORK/$name.json" "d['real_rank_kicked']")" = False ] ||
            check_fail "$name: the real rank 1 lost its connection $(field "$WORK/$name.json" "d['real_rank_lost_connection_lines']") time(s)"
        [ "$(field "$WORK/$name.json" "d['slot_taken']")" = False ] ||
            check_fail "$name: /metrics showed the impostor's claim as rank 1's in $(field "$WORK/$name.json" "d['claim_in_metrics_samples']") of $(field "$WORK/$name.json" "d['metrics_samples']") scrapes"
        [ "$(field "$WORK/$name.json" "d['false_report']")" = False ] ||
            check_fail "$name: a live report names the fake pid: $(field "$WORK/$name.json" "d['reports_naming_fake_pid']")"
    fi
    n=$(ls "$WORK/$name"/*/live-report.txt 2>/dev/null | wc -l)
    [ "$n" = 0 ] || check_fail "$name: a healthy job got a live report: $(sed -n 2p "$WORK/$name"/*/live-report.txt | head -1)"
    d=$(grep -c "the live collector asks for a dump" "$WORK/launch.err")
    [ "$d" = 0 ] || check_fail "$name: the collector asked real ranks for $d dump(s)"
    echo "$name: real ranks asked for dumps: $d; live reports: $n"
    stop_job
    stop_serve
    rm -rf "$NCCLWATCH_DIR"
}

# ---- 1. no token ----
attack notoken

# ---- 2. token on both sides; the impostor knows it ----
export NCCLWATCH_TOKEN="imp-token-$$"
SERVE_ARGS=--metrics-ids attack token --token "$NCCLWATCH_TOKEN"

# ---- control: the token keeps out who does not have it ----
start_serve control
launch_job 4 --steps 5 --count 1024 --hold-ms 60000
if wait_for 20 four_connected; then
    timeout 20 "$PY" "$HC" --max-seconds 15 impersonate --port "$PORT" --metrics-port "$MPORT" --rank 1 \
        --duration 3 --report-dir "$WORK/control" >"$WORK/control.json" 2>&1
    echo "control (no token): $(cat "$WORK/control.json")"
    [ "$(field "$WORK/control.json" "d['rejects'].get('token refused', 0) > 0 and not d['slot_taken']")" = True ] ||
        check_fail "control: an impostor without the token was not refused"
else
    check_fail "control: the job did not connect"
fi
stop_job
stop_serve
unset NCCLWATCH_TOKEN

checks_done "ok: an impostor of a live rank, with or without the token, neither displaced it nor caused a report"

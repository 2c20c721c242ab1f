#!/bin/bash
# Attack test (issue 28, points 5 and 8): a local process that speaks for a rank before the job starts, and a wrong
# token hidden in a flood. Every check states the right answer.
#
# 1. No token. A client says Hello as rank 1 of job preempt-job, pid 31337 (no such process holds its socket), before
#    the job starts, and claims rank 1 stuck in an all_reduce for two minutes. Then the real 4-rank job runs healthy.
#    RIGHT ANSWER: the claim is refused (a Reject "identity refused", and one collector log line naming the claimed
#    pid and the process that really holds the socket); the real rank 1 connects (every rank logs that it sends
#    live digests); no live report is written and no real rank is asked for a dump.
# 2. With NCCLWATCH_TOKEN. The real job runs; 3,000 Hellos with a wrong token for jobs nobody runs; then one with a
#    wrong token as rank 2 of preempt-job. RIGHT ANSWER: that one is named on a log line of its own (job, rank, pid,
#    peer), not lost among the flood's.
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~25 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
SERVE_PID=""
trap 'stop_job; stop_serve; cleanup' EXIT

start_serve() { serve_into "$1" --timeout 2 --dead-after 3; }
senders() { grep -c "sending live digests to the collector at" "$WORK/launch.err"; }
four_sending() { [ "$(senders)" -ge 4 ]; }

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30 NCCLWATCH_JOB_ID=preempt-job
export NCCLWATCH_LOG_LEVEL=debug  # each rank's connection and a dump request are said at debug level

# ---- 1. first Hello, no token ----
start_serve first
timeout 20 "$PY" "$HC" --max-seconds 15 claim --port "$PORT" --job preempt-job --rank 1 --pid 31337 \
    --duration 6 >"$WORK/claim.json" 2>"$WORK/claim.err" &
CLAIM_PID=$!
answered() { grep -q "claims pid 31337" "$WORK/first.err" || metrics | grep -q 'job_id="preempt-job"'; }
wait_for 5 answered || check_fail "the collector neither took nor refused the claim: $(cat "$WORK/first.err")"
launch_job 4 --steps 5 --count 1024 --hold-ms 30000
wait "$CLAIM_PID"
echo "claim: $(cat "$WORK/claim.json")"
[ "$(field "$WORK/claim.json" "d['acked']")" = False ] || check_fail "the collector took the Hello of pid 31337 as rank 1"
grep -q "identity refused" "$WORK/claim.json" || check_fail "no Reject saying the identity was refused"
grep "claims pid 31337" "$WORK/first.err" | head -2
grep -q "claims pid 31337.*held by pid [0-9]" "$WORK/first.err" ||
    check_fail "no log line names the claimed pid and the process holding the socket: $(tail -3 "$WORK/first.err")"
wait_for 10 four_sending || check_fail "only $(senders) of 4 real ranks send live digests (rank 1 kept out?)"
n=$(ls "$WORK"/first/*/live-report.txt 2>/dev/null | wc -l)
[ "$n" = 0 ] || check_fail "a healthy job got a live report: $(sed -n 1,3p "$WORK"/first/*/live-report.txt | head -3)"
d=$(grep -c "the live collector asks for a dump" "$WORK/launch.err")
[ "$d" = 0 ] || check_fail "the collector asked real ranks for $d dump(s)"
echo "first Hello: live reports $n, dump requests $d, ranks sending $(senders)"
stop_job
stop_serve
rm -rf "$NCCLWATCH_DIR"

# ---- 2. a wrong token for a known job, behind a flood ----
export NCCLWATCH_TOKEN="preempt-token-$$"
start_serve token
launch_job 4 --steps 5 --count 1024 --hold-ms 30000
wait_for 15 four_sending || check_fail "token: the job did not connect"
timeout 30 "$PY" "$HC" --max-seconds 25 hello-flood --port "$PORT" --count 3000 --token not-it --wait 3 \
    >"$WORK/flood.json" 2>"$WORK/flood.err" || check_fail "the flood did not run: $(cat "$WORK/flood.err")"
echo "flood: $(cat "$WORK/flood.json")"
timeout 15 "$PY" "$HC" --max-seconds 10 claim --port "$PORT" --job preempt-job --rank 2 --pid 0 --token not-it \
    --duration 2 >"$WORK/wrong.json" 2>&1
echo "wrong token as rank 2: $(cat "$WORK/wrong.json")"
named() { grep -q "wrong token.*job preempt-job rank 2 pid [0-9]" "$WORK/token.err"; }
wait_for 5 named || check_fail "the wrong token for preempt-job rank 2 is not named on a line of its own: $(grep -c "wrong token" "$WORK/token.err") generic line(s)"
grep "job preempt-job rank 2" "$WORK/token.err" | head -1
stop_job
stop_serve
unset NCCLWATCH_TOKEN

checks_done "ok: a false pid is refused before the job starts and the real rank gets in; a wrong token for a known job is named"

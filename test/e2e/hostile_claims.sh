#!/bin/bash
# Attack test (issue 45, item 2): claims that would cost `serve` what no rank sent. Every check states the right
# answer. No token, loopback: each client process proves its own pid (issue 28, point 5), and no more.
#
# At once, each held open:
#   - one process sends ONE Digest of 3,971 communicators (all one frame of 1 MiB holds), each claiming 65,536 ranks
#     (inside --max-job-ranks) and stuck for two minutes;
#   - another sends one Digest of 64 such communicators (17 KB);
#   - three processes claim 5,000 ranks each of one job of 15,000 (one pid, many ranks).
# Then a real 4-rank job whose rank 2 skips step 5's all_reduce (serve --timeout 3).
# RIGHT ANSWER:
#   - serve's peak RSS (VmHWM) stays under 150 MB, and it uses under half a core meanwhile: its memory and time follow
#     what the ranks sent (a frame of 1 MiB, one process a rank), never what they claim;
#   - the real hang is reported live, NOT_JOINED culprit [2], within 2 s of being due (its verdict's stalled_for_s at
#     most 2 s past the timeout);
#   - no fake job's live-report.json is over 1 MB (a claimed rank that never reported is no line of a report);
#   - the claimed communicators are set aside with a log line per job (their absent ranks are more than the job's
#     reports justify); at most one rank is taken per process (3 of 15,000), the others refused with a log line;
#   - SIGTERM ends serve within 2 s.
# Before the fix serve went past 3 GB within seconds of the first digest, analysed it for minutes on the loop that
# reads the ranks (no report of the real job), and did not exit on SIGTERM meanwhile (docs/PERFORMANCE.md, "The
# collector under attack"). serve runs here under `ulimit -v` 3 GB, so that such a regression fails the test rather
# than the machine.
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~25 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hostile_lib.sh"
gone() { [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30
SERVE_VMEM_KB=3000000 serve_into serve --timeout 3 --dead-after 3
t0=$(now_ms)
c0=$(cpu_ticks "$SERVE_PID")
HOLD=14
timeout 40 "$PY" "$HC" --max-seconds 35 claims --port "$PORT" --job claims-4096 --comms 4096 --nranks 65536 \
    --hold $HOLD >"$WORK/claims4096.json" 2>"$WORK/claims4096.err" &
BG_PIDS="$!"
timeout 40 "$PY" "$HC" --max-seconds 35 claims --port "$PORT" --job claims-64 --comms 64 --nranks 65536 \
    --hold $HOLD >"$WORK/claims64.json" 2>"$WORK/claims64.err" &
BG_PIDS="$BG_PIDS $!"
for k in 0 1 2; do
    timeout 40 "$PY" "$HC" --max-seconds 35 fake-ranks --port "$PORT" --count 5000 --job fifteen --rank0 $((k * 5000)) \
        --nranks 15000 --world 15000 --stalled --say-sent --hold $HOLD \
        >"$WORK/fifteen$k.json" 2>"$WORK/fifteen$k.err" &
    BG_PIDS="$BG_PIDS $!"
done
# The real job once the collector has answered every claim (at most 10 s: a collector that never does is measured
# with them under way).
answered() {
    grep -q "job claims-4096: [0-9]* communicator(s) set aside" "$WORK/serve.err" &&
        grep -q "job claims-64: 64 communicator(s) set aside" "$WORK/serve.err" &&
        [ "$(cat "$WORK"/fifteen?.err | grep -c "sent 5000")" = 3 ]
}
wait_for 10 answered || check_fail "the collector did not answer the claims within 10 s ($(tail -1 "$WORK/serve.err"))"
real_hang_reported 20 '/claims-|/fifteen/' "under the claims" 2
serve_usage "$t0" "$c0" "under the claims"
[ "${HWM:-999999}" -lt 150000 ] || check_fail "peak RSS ${HWM:-?} kB >= 150 MB"
awk -v c="$CORES" 'BEGIN { exit !(c < 0.5) }' || check_fail "$CORES cores busy under the claims (>= 0.5)"
nfull=$(grep -c "collector full" "$WORK/launch.err")
[ "$nfull" = 0 ] || check_fail "real ranks were refused: $(grep -m1 "collector full" "$WORK/launch.err")"

stop_serve
for f in "$WORK"/serve/*/live-report.json; do
    [ -f "$f" ] || continue
    b=$(stat -c %s "$f")
    echo "$(basename "$(dirname "$f")")/live-report.json: $b bytes"
    [ "$b" -lt 1000000 ] || check_fail "$f is $b bytes (>= 1 MB)"
done
for p in $BG_PIDS; do wait "$p"; done
BG_PIDS=""
for f in claims4096 claims64 fifteen0 fifteen1 fifteen2; do echo "$f: $(cat "$WORK/$f.json")"; done
taken=0
for k in 0 1 2; do taken=$((taken + $(field "$WORK/fifteen$k.json" "d['acked']" 2>/dev/null || echo 99999))); done
echo "ranks of the 15,000 taken: $taken"
[ "$taken" -le 3 ] || check_fail "$taken of 15,000 ranks claimed by 3 processes were taken (a process is one rank)"
for what in "job claims-4096: 3971 communicator(s) set aside" "job claims-64: 64 communicator(s) set aside" \
    "one process is one rank"; do
    grep -m1 -F "$what" "$WORK/serve.err" || check_fail "no log line says '$what'"
done

# SIGTERM while it judges claims: a collector of its own, the 64 communicators' digest, SIGTERM once it is busy (a
# collector that judges what the frame carried is never busy that long: then SIGTERM comes after 2 s).
SERVE_VMEM_KB=3000000 serve_into term --timeout 3 --dead-after 3
c0=$(cpu_ticks "$SERVE_PID")
timeout 20 "$PY" "$HC" --max-seconds 15 claims --port "$PORT" --job claims-term --comms 64 --nranks 65536 --hold 5 \
    >"$WORK/term.json" 2>&1 &
BG_PIDS="$!"
busy() { [ $(($(cpu_ticks "$SERVE_PID") - c0)) -ge $(($(getconf CLK_TCK) / 5)) ]; }
wait_for 2 busy && echo "serve busy with the claims: SIGTERM now" || echo "serve not busy within 2 s: SIGTERM now"
ts=$(now_ms)
kill -TERM "$SERVE_PID"
if wait_for 2 gone "$SERVE_PID"; then
    echo "SIGTERM: serve gone after $(($(now_ms) - ts)) ms"
else
    check_fail "serve still running 2 s after SIGTERM"
fi
stop_serve
stop_bg

checks_done "ok: claimed communicators and ranks cost serve nothing they did not carry; the real hang reported on time"

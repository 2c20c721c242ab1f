#!/bin/bash
# Attack test (issue 45, item 2): fake jobs that look alive. Every check states the right answer.
#
# `serve`, no token, loopback. One process opens 4,096 connections (the collector's --max-jobs), each a job of its own
# whose counts grow (a Hello and two Digests, the second one collective further: admission.h's "training"), held
# open. Then a real 4-rank job whose rank 2 skips step 5's all_reduce (serve --timeout 3).
# RIGHT ANSWER: no real rank is told "collector full" (a job is never forgotten for room while its counts grow, but
# counts are a claim: the fake jobs' ranks share one process, and a process is one rank, so they never fill the
# collector); the hang is reported live, NOT_JOINED culprit [2], within 2 s of being due; serve's peak RSS stays under
# 150 MB. Before the fix every real rank was refused "collector full" until the fake jobs went quiet (2 minutes).
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~25 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hostile_lib.sh"

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30
SERVE_VMEM_KB=3000000 serve_into serve --timeout 3 --dead-after 3
t0=$(now_ms)
c0=$(cpu_ticks "$SERVE_PID")
timeout 40 "$PY" "$HC" --max-seconds 35 lively-jobs --port "$PORT" --count 4096 --hold 18 >"$WORK/lively.json" \
    2>"$WORK/lively.err" &
BG_PIDS="$!"
sent() { grep -q "sent 4096" "$WORK/lively.err"; }
wait_for 15 sent || check_fail "the fake jobs were not all sent within 15 s"
# Their digests read (the collector's ranks gauge stops growing) before the real job starts.
ranks_of() { metrics | sed -n 's/^ncclwatch_collector_ranks \([0-9]*\)$/\1/p'; }
settled() {
    local a b
    a=$(ranks_of)
    sleep 0.3
    b=$(ranks_of)
    [ -n "$a" ] && [ "$a" = "$b" ]
}
wait_for 10 settled || check_fail "the collector's rank count did not settle"
echo "ranks the collector holds before the real job: $(ranks_of)"
real_hang_reported 15 '/lively-' "beside the lively jobs" 2
serve_usage "$t0" "$c0" "beside the lively jobs"
[ "${HWM:-999999}" -lt 150000 ] || check_fail "peak RSS ${HWM:-?} kB >= 150 MB"
nfull=$(grep -c "collector full" "$WORK/launch.err")
echo "real ranks told 'collector full': $nfull log line(s)"
[ "$nfull" = 0 ] || check_fail "real ranks were refused: $(grep -m1 "collector full" "$WORK/launch.err")"
stop_serve
wait "$BG_PIDS"
BG_PIDS=""
echo "lively-jobs: $(cat "$WORK/lively.json")"

checks_done "ok: fake jobs whose counts grow keep no real rank out; the real hang reported on time"

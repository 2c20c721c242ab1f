#!/bin/bash
# Attack test (issue 28, point 4): starving the collector without a token. Every check states the right answer.
#
# A. `serve`: 30 clients, each a job of its own claiming a communicator of 2^20 ranks stuck for two minutes (about
#    45 KB sent in all), and 4,096 connections that say Hello as a job of their own each and are held open (the
#    collector's 4,096 jobs). Then a real 4-rank job whose rank 2 skips step 5's all_reduce.
#    RIGHT ANSWER: the real ranks are never told "collector full"; the hang is reported live (NOT_JOINED, culprit
#    [2]) within 15 s of the launch; serve's peak RSS stays under 150 MB and it uses under half a core meanwhile
#    (a claimed communicator size sizes nothing: the claim is set aside).
# B. NCCLWATCH_COLLECTOR=auto, the collector inside rank 0: 2,000 fake ranks of the job's own id past its
#    WORLD_SIZE and 3 fake jobs, each claiming a communicator of 2^20 ranks. RIGHT ANSWER: rank 0's peak RSS grows by
#    less than 32 MB, and the real hang is still reported in the job folder.
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~30 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hostile_lib.sh"

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30

# ---- A. serve ----
serve_into serve --timeout 3 --dead-after 3
t0=$(now_ms)
c0=$(cpu_ticks "$SERVE_PID")
timeout 40 "$PY" "$HC" --max-seconds 35 fake-ranks --port "$PORT" --count 30 --jobs 30 --job huge --nranks 1048576 \
    --world 1048576 --stalled --hold 30 >"$WORK/huge.txt" 2>"$WORK/huge.err" &
BG_PIDS="$!"
timeout 40 "$PY" "$HC" --max-seconds 35 hello-flood --port "$PORT" --count 4096 --wait 2 --hold 28 \
    >"$WORK/held.txt" 2>"$WORK/held.err" &
BG_PIDS="$BG_PIDS $!"
FLOOD_PY=$(pgrep -P "$!" | head -1)
held() { [ "$(ls "/proc/$FLOOD_PY/fd" 2>/dev/null | wc -l)" -ge 4096 ]; }
wait_for 10 held || check_fail "the flood did not open its 4,096 connections"
real_hang_reported 15 '/huge-[0-9]*/|/flood-[0-9]*/' "under the flood"
serve_usage "$t0" "$c0" "under the flood"
[ "$HWM" -lt 150000 ] || check_fail "serve: peak RSS $HWM kB >= 150 MB"
awk -v c="$CORES" 'BEGIN { exit !(c < 0.5) }' || check_fail "serve: $CORES cores busy under the flood (>= 0.5)"
nfull=$(grep -c "collector full" "$WORK/launch.err")
[ "$nfull" = 0 ] || check_fail "serve: real ranks were refused: $(grep -m1 "collector full" "$WORK/launch.err")"
stop_bg
stop_job
stop_serve
rm -rf "$NCCLWATCH_DIR"

# ---- B. auto: the collector inside rank 0 ----
export NCCLWATCH_COLLECTOR=auto NCCLWATCH_TIMEOUT_SEC=3 NCCLWATCH_JOB_ID=starve-auto
export NCCLWATCH_LOG_LEVEL=debug NCCLWATCH_LOG_FORMAT=full
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 20 auto_listening || fail "rank 0 started no collector"
APORT=$(sed -n 's/.*live collector listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/launch.err" | head -1)
R0=$(sed -n 's/.*\[ncclwatch rank 0 pid \([0-9]*\) .*/\1/p' "$WORK/launch.err" | head -1)
[ -n "$R0" ] && [ -d "/proc/$R0" ] || fail "rank 0's pid not found in the log"
h0=$(hwm_kb "$R0")
c0=$(cpu_ticks "$R0")
t0=$(now_ms)
timeout 30 "$PY" "$HC" --max-seconds 25 fake-ranks --port "$APORT" --count 2000 --job starve-auto --rank0 4 \
    --nranks 1048576 --stalled --hold 4 >"$WORK/auto_ranks.txt" 2>&1 &
BG_PIDS="$!"
timeout 30 "$PY" "$HC" --max-seconds 25 fake-ranks --port "$APORT" --count 3 --jobs 3 --job other --nranks 1048576 \
    --stalled --hold 4 >"$WORK/auto_jobs.txt" 2>&1
wait $BG_PIDS
BG_PIDS=""
wait_for 20 test -s "$(job_dir)/live-report.txt" || check_fail "auto: no live report of the real hang in the job folder"
grep -q "rank 2" "$(job_dir)/live-report.txt" 2>/dev/null || check_fail "auto: the live report does not name rank 2"
h1=$(hwm_kb "$R0")
c1=$(cpu_ticks "$R0")
t1=$(now_ms)
cores=$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", c / hz / (t / 1000) }')
echo "auto: rank 0 VmHWM $h0 kB before the fake ranks, $h1 kB after; $cores core(s) over $(( (t1 - t0) / 1000 )) s"
echo "auto fake ranks: $(cat "$WORK/auto_ranks.txt")"
echo "auto fake jobs: $(cat "$WORK/auto_jobs.txt")"
[ $((h1 - h0)) -lt 32768 ] || check_fail "auto: rank 0's peak RSS grew by $((h1 - h0)) kB (>= 32 MB) under fake ranks"
stop_job

checks_done "ok: claimed sizes, held connections and fake jobs neither starve serve nor rank 0; the real hang is reported"

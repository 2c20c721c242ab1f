# What the attack tests share (sourced after lib.sh): the hostile client, the collector's and the attackers' processes
# ended at exit, and how a process's peak memory and CPU are read.
HC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/hostile_client.py"
SERVE_PID=""
BG_PIDS=""  # the attackers started in the background
stop_bg() {
    local p
    for p in $BG_PIDS; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BG_PIDS=""
}
trap 'stop_bg; stop_job; stop_serve; cleanup' EXIT
hwm_kb() { sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now_ms() { date +%s%3N; }

# real_hang_reported SECONDS EXCLUDE WHAT [LATE_MAX]: the real job beside an attack (4 ranks; rank 2 skips step 5's
# all_reduce) launched, and its live report waited for SECONDS: the first live-report.json whose path matches no
# EXCLUDE (grep -E, the attackers' job folders). The check fails unless it says NOT_JOINED [2] and, with LATE_MAX, came
# within LATE_MAX s of being due (its stalled_for_s past the timeout).
real_hang_reported() {
    local seconds=$1 exclude=$2 what=$3 late_max=${4:-} tl r k c late=""
    launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
    tl=$(now_ms)
    real_report() { ls "$WORK"/serve/*/live-report.json 2>/dev/null | grep -Ev "$exclude" | head -1; }
    has_real_report() { [ -n "$(real_report)" ]; }
    if ! wait_for "$seconds" has_real_report; then
        check_fail "the real hang was not reported within $seconds s of the launch ($(tail -2 "$WORK/serve.err"))"
        return
    fi
    r=$(real_report)
    k=$(json_get "$r" "d['verdicts'][0]['kind']")
    c=$(json_get "$r" "d['verdicts'][0]['culprits']")
    [ -n "$late_max" ] && late=$(json_get "$r" "round(d['verdicts'][0]['stalled_for_s'] - d['timeout_s'], 2)")
    echo "the real hang: reported $(($(now_ms) - tl)) ms after the launch${late:+, $late s after it was due}: $k $c"
    [ "$k" = NOT_JOINED ] && [ "$c" = "[2]" ] || check_fail "wrong live verdict $what: $k $c"
    [ -z "$late_max" ] || awk -v l="$late" -v m="$late_max" 'BEGIN { exit !(l <= m) }' ||
        check_fail "the real hang was reported $late s after it was due (> $late_max s)"
}

# serve_usage T0_MS C0_TICKS WHAT: serve's peak RSS (HWM, kB) and its cores on average since then (CORES), said.
serve_usage() {
    local c1 t1
    c1=$(cpu_ticks "$SERVE_PID")
    t1=$(now_ms)
    HWM=$(hwm_kb "$SERVE_PID")
    CORES=$(awk -v c=$((c1 - $2)) -v t=$((t1 - $1)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.2f", c / hz / (t / 1000) }')
    echo "serve $3: VmHWM $HWM kB, $CORES core(s) over $(((t1 - $1) / 1000)) s"
}

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

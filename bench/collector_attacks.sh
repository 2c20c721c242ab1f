#!/bin/bash
# `ncclwatch-collector serve` under the claims of issue 45, item 2, one attack at a time, each beside a real 4-rank
# job of the test NCCL whose rank 2 skips step 5's all_reduce (serve --timeout 3): serve's peak RSS (VmHWM), its CPU
# (core-seconds, and cores on average over the window), how late the real hang was reported (its live verdict's
# stalled_for_s past the timeout: the time from the stall being due to the report), the largest live-report.json of a
# fake job, and how long serve took to exit on SIGTERM; and what the real job's ranks paid meanwhile: the largest
# rank's peak RSS (VmHWM) and the ranks' CPU (core-seconds, summed over the 4 ranks' lives until the window's end),
# to read against the `none` row (no attack). No token, loopback only; the attacks are test/e2e/hostile_client.py's.
#   bench/collector_attacks.sh BUILD_DIR [COLLECTOR] [ATTACK...]
#   ATTACK: claims4096 (one Digest of 3,971 communicators of 65,536 ranks, one frame of 1 MiB), claims64 (64 of them,
#           17 KB), lively (4,096 fake jobs whose counts grow, from one process), fifteen (15,000 fake ranks of one
#           job from 3 processes), slowloris (1,000 connections that announce a 1 MiB frame and send none of it),
#           junk (1,000 connections of random bytes), helloflood (5,000 Hellos of one pid), none (the real job
#           alone: the baseline); default: none and the first four.
# COLLECTOR defaults to BUILD_DIR's; give an older build's to compare. serve runs under `ulimit -v` NCW_ATTACK_VMEM_KB
# (default 8 GB), and each attack's window ends WINDOW seconds after the real job starts (NCW_ATTACK_WINDOW, 30): an
# old collector that never reports is measured as it stands then ("none" for the delay).
set -u
build=$(cd "$1" && pwd)
collector=${2:-$build/collector/ncclwatch-collector}
shift $(($# >= 2 ? 2 : 1))
attacks=("$@")
[ ${#attacks[@]} -gt 0 ] || attacks=(none claims4096 claims64 lively fifteen)
here=$(cd "$(dirname "$0")" && pwd)
HC="$here/../test/e2e/hostile_client.py"
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
vmem=${NCW_ATTACK_VMEM_KB:-8000000}
window=${NCW_ATTACK_WINDOW:-30}
work=$(mktemp -d /tmp/ncw-attacks-XXXXXX)
serve_pid="" launch_pid="" bg=""
stop_all() {
    local p
    for p in $bg; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$launch_pid" ] && kill -KILL -- "-$launch_pid" 2>/dev/null
    [ -n "$serve_pid" ] && kill -KILL "$serve_pid" 2>/dev/null
    wait 2>/dev/null
    bg="" launch_pid="" serve_pid=""
}
trap 'stop_all; rm -rf "$work"' EXIT
now_ms() { date +%s%3N; }
hwm_kb() { sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
gone() { [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
until_ok() {  # until_ok SECONDS CMD...: polls CMD every 50 ms
    local end=$(($(now_ms) + $1 * 1000))
    shift
    until "$@"; do
        [ "$(now_ms)" -lt "$end" ] || return 1
        sleep 0.05
    done
}

# The real job's ranks (fake_launch's children): the largest VmHWM, and their CPU ticks summed.
rank_pids() { pgrep -P "$launch_pid" 2>/dev/null; }
ranks_hwm_kb() { local p m=0 v; for p in $(rank_pids); do v=$(hwm_kb "$p"); [ "${v:-0}" -gt "$m" ] && m=$v; done; echo $m; }
ranks_ticks() { local p t=0 v; for p in $(rank_pids); do v=$(ticks "$p"); t=$((t + ${v:-0})); done; echo $t; }
printf '%-11s %12s %12s %8s %14s %12s %10s %12s %12s\n' attack VmHWM_kB cpu_core_s cores verdict_late_s fake_json_B \
    sigterm_ms rank_HWM_kB ranks_cpu_s
for attack in "${attacks[@]}"; do
    out="$work/$attack"
    mkdir -p "$out/live" "$out/dumps"
    bash -c 'ulimit -v "$0" && exec "$@"' "$vmem" "$collector" serve --listen 127.0.0.1:0 --timeout 3 \
        --dead-after 3 --out "$out/live" >"$out/serve.out" 2>"$out/serve.err" &
    serve_pid=$!
    until_ok 10 grep -qs "listening on" "$out/serve.out" ||
        { echo "$attack: serve did not start: $(head -c 300 "$out/serve.err")" >&2; exit 1; }
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$out/serve.out")
    t0=$(now_ms)
    c0=$(ticks "$serve_pid")
    hold=$((window + 20))
    case $attack in
    claims4096 | claims64)
        "$PY" "$HC" --max-seconds $((hold + 10)) claims --port "$port" --job "$attack" --comms "${attack#claims}" \
            --nranks 65536 --hold $hold >"$out/attack.json" 2>&1 &
        bg="$!"
        sleep 2 ;;  # its one frame sent and read
    lively)
        "$PY" "$HC" --max-seconds $((hold + 10)) lively-jobs --port "$port" --count 4096 --hold $hold \
            >"$out/attack.json" 2>"$out/attack.err" &
        bg="$!"
        until_ok 20 grep -q "sent 4096" "$out/attack.err" ;;
    fifteen)
        for k in 0 1 2; do
            "$PY" "$HC" --max-seconds $((hold + 10)) fake-ranks --port "$port" --count 5000 --job fifteen \
                --rank0 $((k * 5000)) --nranks 15000 --world 15000 --stalled --say-sent --hold $hold \
                >"$out/attack$k.json" 2>"$out/attack$k.err" &
            bg="$bg $!"
        done
        sent() { [ "$(cat "$out"/attack?.err | grep -c "sent 5000")" = 3 ]; }
        until_ok 30 sent ;;
    slowloris)
        "$PY" "$HC" --max-seconds $((hold + 10)) slowloris --port "$port" --count 1000 --wait $hold \
            >"$out/attack.json" 2>&1 &
        bg="$!"
        sleep 2 ;;
    junk)
        "$PY" "$HC" --max-seconds $((hold + 10)) junk --port "$port" --count 1000 --wait $hold \
            >"$out/attack.json" 2>&1 &
        bg="$!"
        sleep 2 ;;
    helloflood)
        "$PY" "$HC" --max-seconds $((hold + 10)) hello-flood --port "$port" --count 5000 --hold $hold \
            >"$out/attack.json" 2>&1 &
        bg="$!"
        sleep 2 ;;
    none) ;;
    *) echo "unknown attack $attack" >&2; exit 2 ;;
    esac
    # The real job.
    NCCLWATCH_DIR="$out/dumps" NCCLWATCH_COLLECTOR="127.0.0.1:$port" NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30 \
        LD_PRELOAD="$build/shim/libncclwatch.so" setsid "$build/test/fake_nccl/fake_launch" --nproc 4 --timeout-sec 90 \
        -- "$build/test/fake_nccl/fake_rank" --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000 \
        >"$out/launch.out" 2>"$out/launch.err" &
    launch_pid=$!
    t_launch=$(now_ms)
    disown "$launch_pid"  # killed at the end, without the shell saying so
    report() { ls "$out"/live/torchrun-*/live-report.json 2>/dev/null | head -1; }
    has_report() { [ -n "$(report)" ]; }
    late=none
    if until_ok "$window" has_report; then
        late=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); v=d['verdicts'][0]
print('%.2f' % (v['stalled_for_s'] - d['timeout_s']) + ('' if v['kind'] == 'NOT_JOINED' and v['culprits'] == [2]
      else ' (%s %s)' % (v['kind'], v['culprits'])))" "$(report)")
    fi
    hwm=$(hwm_kb "$serve_pid")
    c1=$(ticks "$serve_pid")
    # The ranks measured at the same age in every row: 15 s after their launch (the hang is 10 s old by then).
    aged() { [ $(($(now_ms) - t_launch)) -ge 15000 ]; }
    until_ok 30 aged
    rhwm=$(ranks_hwm_kb)
    rticks=$(ranks_ticks)
    t1=$(now_ms)
    fake=0
    for f in "$out"/live/*/live-report.json; do
        case $f in */torchrun-*) continue ;; esac
        [ -f "$f" ] && fake=$(($(stat -c %s "$f") > fake ? $(stat -c %s "$f") : fake))
    done
    ts=$(now_ms)
    kill -TERM "$serve_pid" 2>/dev/null
    if until_ok 20 gone "$serve_pid"; then term=$(($(now_ms) - ts)); else term=">20000"; fi
    hz=$(getconf CLK_TCK)
    printf '%-11s %12s %12s %8s %14s %12s %10s %12s %12s\n' "$attack" "${hwm:-?}" \
        "$(awk -v c=$((${c1:-0} - ${c0:-0})) -v hz="$hz" 'BEGIN { printf "%.1f", c / hz }')" \
        "$(awk -v c=$((${c1:-0} - ${c0:-0})) -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%.2f", c / hz / (t / 1000) }')" \
        "$late" "$fake" "$term" "$rhwm" "$(awk -v c="$rticks" -v hz="$hz" 'BEGIN { printf "%.2f", c / hz }')"
    [ -n "${NCW_ATTACK_VERBOSE:-}" ] && grep -v "^$" "$out/serve.err" | cut -c1-200 | sort | uniq -c | sort -rn | head -5
    [ -n "${NCW_ATTACK_VERBOSE:-}" ] && cat "$out"/attack*.json 2>/dev/null | cut -c1-300
    stop_all
done

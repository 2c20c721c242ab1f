#!/bin/bash
# Host or GPU? all_reduce_perf at 8 B, latency (-C 0) and CPU time per iteration (-C 1), -g 1 and -g 2, without the
# shim and with it in three settings, alternated ROUNDS times; prints medians.
#   device tool: run(command="bash bench/gpu_cost_diag.sh", carry=[".carry"], kind="nvidia-h200-x2")
set -u
ROUNDS=${1:-3}
export NCCL_NVLS_ENABLE=0
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
export LD_LIBRARY_PATH=$(dirname "$(find "$SP/nvidia" -name 'libnccl.so.2' | head -1)"):$(dirname "$(find "$SP/nvidia" -name 'libcudart.so.13' | head -1)")
SHIM=$PWD/.carry/libncclwatch.so
ARP=$PWD/.carry/all_reduce_perf
W=$(mktemp -d /tmp/ncw-diag-XXXXXX)
export NCCLWATCH_DIR=$W/ncw
NG=$(nvidia-smi -L | grep -c '^GPU')
configs=${NCW_DIAG_CONFIGS:-"g1C0 g2C0"}
[ "$NG" -ge 2 ] || configs=${configs//g2C0/}
# Pinned to cores near GPU 0 (the run-to-run spread unpinned is several microseconds at 8 B).
CPU=$(nvidia-smi topo -m 2>/dev/null | awk '$1=="GPU0" {for (i=2;i<=NF;i++) if ($i ~ /^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$/ && $i ~ /-/) {print $i; exit}}')
PIN=""
# Four cores, not one: NCCL's proxy thread and our threads must not share the caller's core.
[ -n "$CPU" ] && PIN="taskset -c ${CPU%%-*}-$((${CPU%%-*} + 3))"
echo "pinned with: ${PIN:-nothing} (GPU0 affinity ${CPU:-unknown})"
settings=${NCW_DIAG_SETTINGS:-"without default no_reached no_events"}
for r in $(seq "$ROUNDS"); do
    for c in $configs; do
        g=${c:1:1}; C=${c:3:1}
        args=(-b 8 -e 8 -g "$g" -n 5000 -w 500 -C "$C")
        for s in $settings; do
            case $s in
                without) env $PIN timeout 60 "$ARP" "${args[@]}" ;;
                default) LD_PRELOAD=$SHIM $PIN timeout 60 "$ARP" "${args[@]}" ;;
                no_reached) NCCLWATCH_GPU_REACHED=0 LD_PRELOAD=$SHIM $PIN timeout 60 "$ARP" "${args[@]}" ;;
                no_events) NCCLWATCH_GPU_EVENTS=0 LD_PRELOAD=$SHIM $PIN timeout 60 "$ARP" "${args[@]}" ;;
                sample_all) NCCLWATCH_GPU_SAMPLE=all LD_PRELOAD=$SHIM $PIN timeout 60 "$ARP" "${args[@]}" ;;
            esac >"$W/$c.$s.$r" 2>&1
        done
    done
done
python3 - "$W" "$ROUNDS" "$settings" $configs <<'PY'
import sys, statistics, re
w, rounds, settings, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
print("median out-of-place us per iteration at 8 B (C0: latency, C1: CPU time)")
print("%8s" % "config" + "".join("%12s" % s for s in settings))
for c in configs:
    row = []
    for s in settings:
        v = []
        for r in range(1, rounds + 1):
            for line in open(f"{w}/{c}.{s}.{r}", errors="replace"):
                f = line.split()
                if len(f) > 6 and f[0] == "8" and re.match(r"^[0-9.]+$", f[5]): v.append(float(f[5]))
        row.append("%12.2f" % statistics.median(v) if v else "%12s" % "-")
        print("   ", c, s, sorted(v), file=sys.stderr)
    print("%8s" % c + "".join(row))
PY

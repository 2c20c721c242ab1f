#!/usr/bin/env bash
# Issue 25's scenarios (examples/hang_scenarios.py: order_deadlock, graph_skip, algo_differs, leave_early,
# teardown_hang, oom, pipeline_wrong_peer), each at 4 ranks on one GPU (test/gpu/run_scenario.py, judged by
# scenario_table.py) and in the two-node mode (two torchrun agents of 2 ranks, a folder each, `serve` as the
# collector: run_two_nodes.py, judged by two_nodes_table.py). Everything kept goes to $OUT/issue25.tar.gz.
#   device tool: run(command='bash test/gpu/run_issue25.sh', carry=[".carry"], timeout_s=600)
# Knobs: NCW_I25_SCENARIOS (all seven), NCW_I25_MODES ("one two"), NCW_I25_TIMEOUT_SEC (10), NCW_I25_PARALLEL (4 jobs
# at once).
set -u
OUT=${OUT:-/tmp/ncw-i25-out}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 1
PY=${PY:-python3}
G=test/gpu
SHIM=$REPO/.carry/libncclwatch.so
COLL=$REPO/.carry/ncclwatch-collector
W=/tmp/ncw-i25
rm -rf "$W"
mkdir -p "$W/rows" "$W/logs" "$OUT"
SCEN=${NCW_I25_SCENARIOS:-"order_deadlock graph_skip algo_differs leave_early teardown_hang oom pipeline_wrong_peer"}
MODES=${NCW_I25_MODES:-"one two"}
TO=${NCW_I25_TIMEOUT_SEC:-10}
export NCCL_NVLS_ENABLE=0
args_of() {  # the script's arguments per scenario
    case $1 in
        teardown_hang) echo "--gpu-busy-sec 40" ;;
        leave_early) echo "--short-by 3" ;;
        graph_skip) echo "--bcast-every 0 --at-step 10 --steps 30" ;;
        order_deadlock) echo "--at-step 40" ;;
        pipeline_wrong_peer) echo "--at-step 40" ;;
        *) echo "" ;;
    esac
}
PAR=${NCW_I25_PARALLEL:-4}  # jobs at once: eight at once on one GPU made inits take 20 s (false early stalls)
for mode in $MODES; do
    pids=""
    port=29900
    for s in $SCEN; do
        while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do sleep 1; done
        port=$((port + 4))
        if [ "$mode" = one ]; then
            $PY $G/run_scenario.py --scenario "$s" --variant shim --work "$W/one/$s/shim" --shim "$SHIM" \
                --collector "$COLL" --timeout "$TO" --nproc 4 --one-gpu --max-sec 110 \
                --script-args "$(args_of "$s")" >"$W/logs/one-$s.log" 2>&1 &
        else
            $PY $G/run_two_nodes.py --scenario "$s" --work "$W/2n/$s" --shim "$SHIM" --collector "$COLL" \
                --nproc-per-node 2 --timeout "$TO" --one-gpu --port "$port" --max-sec 100 \
                --script-args "$(args_of "$s")" >"$W/logs/two-$s.log" 2>&1 &
        fi
        pids="$pids $!"
        sleep 3
    done
    # shellcheck disable=SC2086
    wait $pids
done
case " $MODES " in *" one "*)
    echo "== one node, 4 ranks"
    $PY $G/scenario_table.py "$W/one" --nproc 4 --one-gpu --rows-dir "$W/rows" ;;
esac
case " $MODES " in *" two "*)
    echo "== two nodes, 2 ranks each"
    $PY $G/two_nodes_table.py "$W/2n" --scenarios "$SCEN" --rows-dir "$W/rows" --out "$OUT/two_nodes.md" ;;
esac
tar czf "$OUT/issue25.tar.gz" -C /tmp ncw-i25 2>/dev/null
ls -la "$OUT"

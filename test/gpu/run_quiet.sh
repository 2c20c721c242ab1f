#!/usr/bin/env bash
# Quiet by default (issue 27, item 2), as a user sees it: a torch job of 4 ranks on one GPU in which rank 3 (the
# last) skips an all_reduce (examples/hang_scenarios.py --scenario skip), launched with torchrun under the shim with
# no log settings, without and with NCCLWATCH_COLLECTOR=auto. Prints, for each, every [ncclwatch ...] line the job
# wrote on stderr and their count (at most 12 wanted, the verdict first). Everything goes to $OUT/quiet/.
#   device tool: run(command='bash test/gpu/run_quiet.sh', carry=[".carry"], timeout_s=300)
set -u
OUT=${OUT:-/tmp/ncw-quiet-out}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 1
mkdir -p "$OUT/quiet"
export NCCL_NVLS_ENABLE=0
status=0
for collector in none auto; do
    dir=/tmp/ncw-quiet-$collector
    rm -rf "$dir"
    env_collector=()
    [ $collector = auto ] && env_collector=(NCCLWATCH_COLLECTOR=auto)
    # The job hangs for good: ended once the reports are out (the timeout's 10 s, then a few seconds).
    env "${env_collector[@]}" NCCLWATCH_DIR="$dir" NCCLWATCH_TIMEOUT_SEC=10 LD_PRELOAD="$REPO/.carry/libncclwatch.so" \
        timeout -s KILL 50 torchrun --standalone --nproc_per_node=4 --master_port=$((29700 + ${#collector})) \
        examples/hang_scenarios.py --scenario skip --one-gpu --at-step 20 --steps 40 --linger-sec 60 \
        >"$OUT/quiet/$collector.out" 2>"$OUT/quiet/$collector.err"
    grep -a '^\[ncclwatch' "$OUT/quiet/$collector.err" >"$OUT/quiet/$collector.lines"
    n=$(wc -l <"$OUT/quiet/$collector.lines")
    echo "== collector $collector: $n lines from ncclwatch on stderr"
    cat "$OUT/quiet/$collector.lines"
    [ "$n" -ge 1 ] && [ "$n" -le 12 ] || status=1
    head -1 "$OUT/quiet/$collector.lines" | grep -q "NOT_JOINED: rank 3 " || status=1
done
echo "quiet: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status

#!/bin/bash
# Issue 45: a rank's memory follows the communicators alive, not those ever made. Each communicator made and destroyed
# kept about 33 KB under the shim (10,000 of them: 330 MB more a rank). fake_rank --churn-comms --memory-every prints
# each rank's own peak resident memory (its /proc status) as it goes: the growth from the 4,000th communicator
# destroyed to the 20,000th, under the shim, less the same run's without it (the test NCCL keeps about 0.4 KB of its
# own per communicator), must stay under 1 KB per communicator on either rank. From the 4,000th: by then the rank
# file's ring (2 MB, 3 records per communicator) is mostly written and our threads' heaps are made, bounded costs
# that are no communicator's. Without a libcuda (the test NCCL's profiler events alone), and with the fake libcuda
# (the completion poller's passes and pending events then gate each reuse too).
. "$(dirname "$0")/lib.sh"
FROM=4000
TO=20000
N=$((TO + 1))  # the last one carries the steps and stays until the teardown

# peak_growth shim|none [fake_rank args...]: the larger of the two ranks' peak resident memory (KB) after TO
# communicators destroyed less after FROM.
peak_growth() {
    local pre=""
    [ "$1" = shim ] && pre="$NCW_SHIM"
    shift
    rm -rf "$NCCLWATCH_DIR"
    LD_PRELOAD="$pre" "$FAKE_LAUNCH" --nproc 2 --timeout-sec 150 -- "$FAKE_RANK" --steps 3 --churn-comms "$N" \
        --memory-every "$FROM" "$@" >"$WORK/launch.out" 2>"$WORK/launch.err" ||
        fail "the churn of $N communicators failed ($*): $(tail -3 "$WORK/launch.err")"
    # The ranks share the launcher's stdout: each figure is read on its own.
    at() { grep -o "rank $1 churned=$2 vm_hwm_kb=[0-9]*" "$WORK/launch.out" | head -1 | sed 's/.*=//'; }
    local r a b most=0
    for r in 0 1; do
        a=$(at "$r" "$FROM")
        b=$(at "$r" "$TO")
        [ -n "$a" ] && [ -n "$b" ] || fail "no memory figures from rank $r: $(head -c 400 "$WORK/launch.out")"
        [ $((b - a)) -gt "$most" ] && most=$((b - a))
    done
    echo "$most"
}

check() {
    local what=$1
    shift
    local with without
    without=$(peak_growth none "$@") || exit 1
    with=$(peak_growth shim "$@") || exit 1  # last: a failure shows its output
    local churned=$((TO - FROM))
    local per=$(((with - without) * 1024 / churned))
    echo "$what: $churned communicators churned: peak +${with} KB under the shim, +${without} KB without," \
        "${per} B per communicator more"
    [ "$per" -lt 1024 ] ||
        fail "$what: the shim kept ${per} B per communicator made and destroyed (want under 1 KB; issue 45: 33 KB)"
}

check "without a libcuda"
check "with the fake libcuda" --fake-cuda
echo "ok: a rank's memory does not grow with the communicators made and destroyed"

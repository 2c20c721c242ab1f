# shellcheck shell=bash
# Shared by the end-to-end tests of issue 42 ("every position proven": sync_proofs*.sh, unseen_tail.sh): NCCL's
# profiler (v5) names a collective by its CollApi event inside the call but sends no Coll and no KernelCh event for it,
# as NCCL 2.28 does for its symmetric kernels (the test NCCL's FAKE_NCCL_PROFILER_WITHHOLD), and the shim completes
# that op alone once something proves it: a later op's completion, its stream's catch-up event, or a host
# synchronisation (the fake libcudart.so.13's, through fake_rank --torch-sync). Sources lib.sh.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN NCCLWATCH_PROFILER FAKE_NCCL_PROFILER_WITHHOLD
export FAKE_NCCL_PROFILER_VERSION=5
export FAKE_CUDA_HOLD_FILE="$WORK/gpu-hold"

# counts R: "issued reached completed exact ops_issued ops_completed" of rank R's communicator, its dump into
# $WORK/dumpR.json.
counts() {
    local f
    f=$(ls "$(job_dir)"/rank"$1"-*.ncw 2>/dev/null | head -1)
    [ -n "$f" ] || return 1
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump$1.json" 2>/dev/null || return 1
    json_get "$WORK/dump$1.json" "' '.join(str(x) for c in d['comms'] if c['coll_issued'] > 0 for x in
        (c['coll_issued'], c['coll_reached'], c['coll_completed'], int(c['progress_exact']), c['ops_issued'],
         c['ops_completed']))"
}

# records R SEQS...: for each all_reduce #SEQ in rank R's last dump (counts R), "done" or "open", then "/timed" or
# "/-" (gpu_timed: NCCL's KernelCh events timed it).
records() {
    local r=$1
    shift
    "$PY" - "$WORK/dump$r.json" "$@" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
by_seq = {x["seq"]: x for x in d["records"]["items"] if x["op"] == "AllReduce"}
out = []
for s in map(int, sys.argv[2:]):
    x = by_seq.get(s)
    out.append("missing" if x is None else
               ("done" if x["done_ms"] is not None else "open") + "/" + ("timed" if "gpu_timed" in x["flags"] else "-"))
print(" ".join(out))
PYEOF
}

# issue_gap R A B: ms between the issues of all_reduce #A and #B in rank R's last dump (counts R).
issue_gap() {
    json_get "$WORK/dump$1.json" "(lambda r: round(r[$3]['issue_ms'] - r[$2]['issue_ms'], 1))(
        {x['seq']: x for x in d['records']['items'] if x['op'] == 'AllReduce'})"
}

# Every output of the job, listed: the shims' stderr, the report and dump files, and `analyze` and `analyze --json`
# of the folder (run now, into $WORK/analysis.txt and .json).
outputs() {
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" 2>&1
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json" 2>&1
    ls "$WORK/launch.err" "$WORK/analysis.txt" "$WORK/analysis.json" "$(job_dir)"/*.json 2>/dev/null
}

# no_output_says WHAT PATTERN: none of the job's outputs matches the grep pattern (case-insensitive).
no_output_says() {
    local f files="" first=""
    for f in $(outputs); do
        grep -qi "$2" "$f" || continue
        files="$files $(basename "$f")"
        [ -n "$first" ] || first=$(grep -i -m1 "$2" "$f" | sed 's/^ *//' | cut -c1-240)
    done
    [ -z "$files" ] || check_fail "$1: '$2' in$files; the first: $first"
}
no_lower_bounds() { no_output_says "$1" "lower bound"; }

# analyze_lead: the kind and culprits (comm ranks) of `analyze --json`'s lead verdict on the job folder.
analyze_lead() {
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/lead.json"
    json_get "$WORK/lead.json" "(lambda v: (v['kind'], [c['comm_rank'] for c in v['culprits']]))(d['verdicts'][0])"
}

# waiters_say_rank2 WHAT: ranks 0, 1 and 3 each report a stall led by NOT_JOINED rank 2 at #10, and `analyze --json`
# of the folder leads with it; returns once the node's dumps are written (the files are complete from then on).
waiters_say_rank2() {
    local r kind culprits seq got
    wait_for 30 has_files '*.report.json' 3 || fail "$1: no report from the three waiting ranks"
    for r in "$(job_dir)"/rank[013]-*.report.json; do
        kind=$(stall_lead "$r" kind)
        culprits=$(stall_lead "$r" culprits)
        seq=$(stall_lead "$r" seq)
        [ "$kind $culprits $seq" = "NOT_JOINED [2] 10" ] ||
            check_fail "$1: $(basename "$r"): lead $kind $culprits at #$seq, want NOT_JOINED [2] at #10"
    done
    wait_for 10 grep -q "dumps written (stall)" "$WORK/launch.err" || check_fail "$1: the node's dumps are not said"
    got=$(analyze_lead)
    [ "$got" = "('NOT_JOINED', [2])" ] || check_fail "$1: analyze --json leads with $got, want NOT_JOINED [2]"
}

# hang WITHHELD [fake_rank args...]: rank 2 of 4 skips step 5's all_reduce; the others pair their later ones with its
# next and wait in #10, which their GPUs start and never finish (the hold file: every stream completes its first 9
# kernels). The collectives WITHHELD (e.g. 8,9) get no Coll or KernelCh event. The ranks pause 200 ms before step 3
# (the completion poller learns which streams carry NCCL ops from the ring records it has met: a synchronisation
# before that proves nothing), then run back to back (#9 and #10 well within the 10 ms after which the poller puts a
# catch-up event on a quiet stream: see catch_up_possible).
hang() {
    local withheld=$1
    shift
    rm -rf "$NCCLWATCH_DIR"
    echo 9 >"$FAKE_CUDA_HOLD_FILE"
    FAKE_NCCL_PROFILER_WITHHOLD=$withheld NCCLWATCH_TIMEOUT_SEC=1 launch_job 4 --fake-cuda --steps 10 --skip-rank 2 \
        --skip-step 5 --pause-step 3 --pause-ms 200 --hold-ms 60000 "$@"
}

# catch_up_possible: on some waiting rank #10 was issued 10 ms or more after #9 (a loaded machine), so that the
# poller's catch-up event may have gone onto the stream between them and proven #9 (counts 0, 1, 3 first).
catch_up_possible() {
    local r
    for r in 0 1 3; do
        "$PY" -c "import sys; sys.exit(0 if $(issue_gap $r 9 10) >= 10 else 1)" && return 0
    done
    return 1
}

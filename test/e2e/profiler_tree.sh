#!/bin/bash
# Exact GPU positions from NCCL's profiler (v5: each Coll tied to its op by the CollApi handle of its call) when the
# algorithm's KernelCh stops prove nothing: the test NCCL runs its collectives as NCCL's tree (FAKE_NCCL_ALGO=TREE),
# where a leaf's channels stop a few microseconds after they start, whatever its peers do. A clean job: every count
# exact and complete on every rank (a later kernel, or the stream's catch-up event, proves each op's end; no record
# claims an in-collective GPU time). A rank that skips a collective: the leaf that waits in it is reached and NOT
# completed, exactly (its early stop is no completion), and the verdict is NOT_JOINED for the rank that skipped.
# With the ring (the default), the last stop is the op's end: GPU-timed records, exact counts.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN NCCLWATCH_PROFILER
export FAKE_NCCL_PROFILER_VERSION=5

# counts R: "issued reached completed exact timed" of rank R's one communicator.
counts() {
    local f
    f=$(ls "$(job_dir)"/rank"$1"-*.ncw 2>/dev/null | head -1)
    [ -n "$f" ] || return 1  # not started yet (wait_for asks again)
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump$1.json" || fail "dump $f"
    "$PY" - "$WORK/dump$1.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = [c for c in d["comms"] if c["coll_issued"] > 0][0]
if c["gpu_source"] != "nccl-profiler": sys.exit(f"gpu_source {c['gpu_source']}")
timed = sum(1 for r in d["records"]["items"] if r["op"] == "AllReduce" and "gpu_timed" in r["flags"])
print(c["coll_issued"], c["coll_reached"], c["coll_completed"], int(c["progress_exact"]), timed)
PYEOF
}

# A clean tree job: the last op's end comes from the stream's catch-up event once the stream is quiet.
export FAKE_NCCL_ALGO=TREE
touch "$WORK/go"
launch_job 4 --fake-cuda --steps 20 --wait-gone "$WORK/go"
complete() { for r in 0 1 2 3; do [ "$(counts $r)" = "20 20 20 1 0" ] || return 1; done; }
wait_for 20 complete || { for r in 0 1 2 3; do echo "rank $r: $(counts $r)"; done; fail "tree: counts not 20 20 20 exact, untimed"; }
rm -f "$WORK/go"
wait "$LAUNCH_PID"
echo "ok: tree, clean: every rank 20 issued, reached and completed, exact; no in-collective time claimed"

# Rank 2 skips step 5's all_reduce: the others pair their next ones with its later steps and wait in #10.
rm -rf "$NCCLWATCH_DIR"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --fake-cuda --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 30 has_files '*.report.json' 3 || fail "tree: no report from the three waiting ranks"
for r in 0 1 3; do
    got=$(counts $r)
    read -r issued reached completed exact timed <<<"$got"
    [ "$reached" = "$issued" ] && [ "$completed" = $((issued - 1)) ] && [ "$exact" = 1 ] ||
        fail "tree, rank $r waits: issued/reached/completed/exact $got, want reached = issued = completed + 1, exact"
done
for f in "$(job_dir)"/rank[013]-*.report.json; do
    kind=$(json_get "$f" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
    culprits=$(json_get "$f" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
    [ "$kind" = NOT_JOINED ] && [ "$culprits" = "[2]" ] || fail "$f: verdict $kind $culprits, want NOT_JOINED [2]"
done
stop_job
echo "ok: tree, rank 2 skips: the leaf rank 3 is inside #$((issued)) (reached, not completed, exact); NOT_JOINED [2]"

# The ring: its last KernelCh stop is the op's end.
rm -rf "$NCCLWATCH_DIR"
unset NCCLWATCH_TIMEOUT_SEC
export FAKE_NCCL_ALGO=RING
run_job 2 --fake-cuda --steps 20
[ "$JOB_RC" = 0 ] || fail "ring: job exit $JOB_RC"
for r in 0 1; do
    read -r issued reached completed exact timed <<<"$(counts $r)"
    [ "$issued $reached $completed $exact" = "20 20 20 1" ] && [ "$timed" -ge 15 ] ||
        fail "ring rank $r: $issued $reached $completed exact $exact, $timed GPU-timed"
done
echo "ok: ring: exact counts, GPU-timed records"

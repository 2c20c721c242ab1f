#!/bin/bash
# Eight ranks as a Megatron 2 x 4 grid (tensor-parallel groups of 4, data-parallel groups of 2, split from the
# world). Rank 5 skips one tensor-parallel all_reduce: the collector names it and its group as the initiating stall
# and marks the data-parallel groups that wait because of it as cascade. Then rank 6 is SIGKILLed in the same
# layout: DEAD, with where it was. (The CPU stand-in for the eight-GPU issue; the GPU run uses the same layout.)
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2

launch_job 8 --steps 10 --grid 4 --skip-rank 5 --skip-step 5 --hold-ms 60000
wait_for 30 has_files '*.report.json' 3 || fail "no stall report from the waiting tensor-parallel ranks"
"$NCW_COLLECTOR" analyze --json --timeout 1 "$(job_dir)" >"$WORK/a.json"
rc=$?
[ $rc = 1 ] || fail "analyze exit $rc, want 1"
"$PY" - "$WORK/a.json" <<'PY' || fail "cascade verdicts wrong: $(cat "$WORK/a.json" | head -c 3000)"
import json, sys
d = json.load(open(sys.argv[1]))
vs = d["verdicts"]
first = vs[0]
assert first["kind"] == "NOT_JOINED", first["kind"]
assert [c["global_rank"] for c in first["culprits"]] == [5], first["culprits"]
assert first["role"] == "initiating", first["role"]
cascades = [v for v in vs if v["role"] == "cascade"]
# The three data-parallel groups whose tensor-parallel partner (ranks 4, 6, 7) waits in the stalled group.
assert len(cascades) == 3, [(v["kind"], v["role"], v["comm_id"]) for v in vs]
assert all(v["caused_by_comm"] == first["comm_id"] for v in cascades)
assert sorted(c["global_rank"] for v in cascades for c in v["culprits"]) == [4, 6, 7]
assert not any(v["kind"] == "STUCK_IN_NCCL" for v in vs), [v["kind"] for v in vs]
PY
# Rank 0 waits in its data-parallel group (a cascade): its own report leads with the initiating stall (one lead per
# event), then its own communicator's verdict as a cascade of it.
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "no stall report from rank 0 (data-parallel group)"
"$PY" - "$WORK/a.json" "$(job_dir)"/rank0-*.report.json <<'PY' || fail "rank 0's report does not name the cause"
import json, sys
first = json.load(open(sys.argv[1]))["verdicts"][0]
d = json.load(open(sys.argv[2]))
stall = [e for e in d["events"] if e["type"] == "stall"][0]
vs = stall["verdicts"]
assert vs[0]["role"] == "initiating" and vs[0]["kind"] == "NOT_JOINED" and vs[0]["comm_id"] == first["comm_id"], vs[0]
assert any(v["role"] == "cascade" and v["caused_by_comm"] == first["comm_id"] for v in vs[1:]), vs
PY
"$NCW_COLLECTOR" analyze --color never "$(job_dir)" | head -1 | grep -q "^VERDICT  rank 5 .*never issued AllReduce #10" ||
    fail "the report's first line does not name rank 5"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null; wait "$LAUNCH_PID" 2>/dev/null; LAUNCH_PID=""
rm -rf "$NCCLWATCH_DIR"

launch_job 8 --steps 10 --grid 4 --die-rank 6 --die-step 5 --hold-ms 60000
wait_for 30 has_files '*.report.json' 3 || fail "no stall report after rank 6 died"
# Offline analysis has no kill(pid, 0): a rank counts as gone once its heartbeat is 5 s older than the newest.
dead_named() {
    "$NCW_COLLECTOR" analyze --json --timeout 1 "$(job_dir)" >"$WORK/b.json"
    grep -q '"kind": "DEAD"' "$WORK/b.json"
}
wait_for 30 dead_named || fail "no DEAD verdict: $(head -c 3000 "$WORK/b.json")"
"$PY" - "$WORK/b.json" <<'PY' || fail "DEAD verdict wrong: $(cat "$WORK/b.json" | head -c 3000)"
import json, sys
d = json.load(open(sys.argv[1]))
vs = d["verdicts"]
first = vs[0]
assert first["kind"] == "DEAD", first["kind"]
assert [c["global_rank"] for c in first["culprits"]] == [6], first["culprits"]
assert first["role"] in ("initiating", "none"), first["role"]
assert any("last issued" in e or "completed #" in e for e in first["evidence"]), first["evidence"]
PY
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null; wait "$LAUNCH_PID" 2>/dev/null; LAUNCH_PID=""
rm -rf "$NCCLWATCH_DIR"

# Rank 5 sleeps before step 5's collectives (examples/grid_2x4.py's slow_eval): it issues neither its tensor- nor
# its data-parallel op. Rank 1 waits in DP[1,5] for it directly (its own NOT_JOINED, no cascade), yet its report
# leads with the job's initiating stall, TP[4-7], which names the same process: one event, one lead.
launch_job 8 --steps 10 --grid 4 --sleep-rank 5 --sleep-step 5 --sleep-ms 60000 --hold-ms 60000
wait_for 30 has_files 'rank1-*.report.json' 1 || fail "no stall report from rank 1 (DP[1,5])"
wait_for 10 has_files '*.report.json' 4 || fail "fewer than 4 stall reports"
"$NCW_COLLECTOR" analyze --json --timeout 1 "$(job_dir)" >"$WORK/c.json"
"$PY" - "$WORK/c.json" "$(job_dir)"/rank1-*.report.json <<'PY' || fail "rank 1's report does not lead with TP[4-7]"
import json, sys
first = json.load(open(sys.argv[1]))["verdicts"][0]
assert first["kind"] == "NOT_JOINED" and first["role"] == "initiating", first
assert [c["global_rank"] for c in first["culprits"]] == [5], first["culprits"]
d = json.load(open(sys.argv[2]))
stall = [e for e in d["events"] if e["type"] == "stall"][0]
vs = stall["verdicts"]
assert vs[0]["role"] == "initiating" and vs[0]["comm_id"] == first["comm_id"], vs[0]
own = [v for v in vs[1:] if v["comm_id"] == stall["comm_id"]]
assert own and own[0]["kind"] == "NOT_JOINED" and own[0]["role"] != "cascade", vs
PY
echo "ok: rank 5 initiating, three data-parallel groups cascade; rank 6 DEAD; rank 1's report leads with TP[4-7]"

#!/bin/bash
# The shim as NCCL's profiler plugin, over the test NCCL (which loads it as NCCL 2.26-2.28 do and emits Coll and
# KernelCh events with GPU timers 1000 s ahead of our clock): with NCCL_PROFILER_PLUGIN unset, the shim points NCCL at
# itself; each collective's GPU start and end come from NCCL's events (gpu_timed records, converted to our clock),
# and the counts are exact. For the v3, v4 and v5 tables; off with NCCLWATCH_PROFILER=off; a plugin the user set is
# kept (and said so); and a rank that skips a collective is NOT_JOINED, with its peers proven inside the op. Sends and
# receives (a pipeline, one stage per rank): followed through NCCL's P2p events by identity (v5: P2pApi), exact; with
# the v4 table (no identity) never called exact; and a stage away before its send is NOT_JOINED, the waits proven.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN FAKE_NCCL_PROFILER_VERSION NCCLWATCH_PROFILER

# check_files WANT_SOURCE WANT_EXACT MIN_TIMED: every rank file's communicator and records.
check_files() {
    local f
    for f in "$(job_dir)"/rank*.ncw; do
        "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump $f"
        "$PY" - "$WORK/dump.json" "$@" <<'EOF' || fail "$f: see above"
import json, sys
d = json.load(open(sys.argv[1]))
want_source, want_exact, min_timed = sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
comms = [c for c in d["comms"] if c["coll_issued"] > 0]
if not comms: sys.exit("no communicator with collectives")
for c in comms:
    if c["gpu_source"] != want_source: sys.exit(f"gpu_source {c['gpu_source']}, want {want_source}")
    if c["progress_exact"] != want_exact: sys.exit(f"progress_exact {c['progress_exact']}, want {want_exact}")
    if c["coll_completed"] != c["coll_issued"] or c["coll_reached"] != c["coll_issued"]:
        sys.exit(f"issued {c['coll_issued']} reached {c['coll_reached']} completed {c['coll_completed']}")
    if c["gpu_clock_uncertainty_ns"] > 1e9: sys.exit(f"clock conversion off: {c['gpu_clock_uncertainty_ns']} ns")
recs = [r for r in d["records"]["items"] if r["op"] == "AllReduce"]
timed = [r for r in recs if "gpu_timed" in r["flags"]]
if len(timed) < min_timed: sys.exit(f"{len(timed)} of {len(recs)} all_reduce records gpu_timed, want >= {min_timed}")
for r in timed:
    # Our clock, not the GPU's (1000 s ahead): between the call and a second after it.
    if not (r["issue_ms"] - 1000 <= r["reached_ms"] <= r["done_ms"] <= r["issue_ms"] + 1000):
        sys.exit(f"GPU times not converted: issue {r['issue_ms']} reached {r['reached_ms']} done {r['done_ms']} ms")
EOF
    done
}

# waiting_ranks_say_rank2 WHAT: ranks 0, 1 and 3 each report a stall whose lead is NOT_JOINED rank 2.
waiting_ranks_say_rank2() {
    local r kind culprits
    wait_for 30 has_files '*.report.json' 3 || fail "$1: no report from the three waiting ranks"
    for r in "$(job_dir)"/rank[013]-*.report.json; do
        kind=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
        culprits=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
        [ "$kind" = NOT_JOINED ] && [ "$culprits" = "[2]" ] || fail "$1: $r: verdict $kind $culprits, want NOT_JOINED [2]"
    done
}

for v in 5 4 3; do
    rm -rf "$NCCLWATCH_DIR"
    FAKE_NCCL_PROFILER_VERSION=$v run_job 2 --steps 20
    [ "$JOB_RC" = 0 ] || fail "v$v: job exit $JOB_RC"
    # The first collectives ride on the call's return until NCCL's kernel events are known to flow.
    check_files nccl-profiler 1 17
    echo "ok: profiler v$v: exact counts, GPU times on our clock"
done

# check_p2p VERSION: a clean pipeline's point-to-point records, and what the communicator's counts claim.
check_p2p() {
    local f
    for f in "$(job_dir)"/rank*.ncw; do
        "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump $f"
        "$PY" - "$WORK/dump.json" "$1" <<'EOF' || fail "v$1: $f: see above"
import json, sys
d = json.load(open(sys.argv[1]))
v = int(sys.argv[2])
c = [c for c in d["comms"] if c["p2p_sends"] + c["p2p_recvs"] > 0][0]
p2p = [r for r in d["records"]["items"] if r["op"] in ("Send", "Recv")]
if len(p2p) != c["p2p_sends"] + c["p2p_recvs"] or any(r["done_ms"] is None for r in p2p):
    sys.exit(f"{sum(r['done_ms'] is None for r in p2p)} of {len(p2p)} send/recv records not done")
if v >= 5 and (c["gpu_source"], c["progress_exact"]) != ("nccl-profiler", True):
    sys.exit(f"v5: gpu_source {c['gpu_source']}, exact {c['progress_exact']}: want nccl-profiler, exact")
if v < 5 and c["gpu_source"] == "nccl-profiler" and c["progress_exact"]:
    sys.exit("v4: exact counts claimed, but no P2p event names its op")
EOF
    done
}
for v in 5 4; do
    rm -rf "$NCCLWATCH_DIR"
    FAKE_NCCL_PROFILER_VERSION=$v run_job 4 --pipeline --steps 10
    [ "$JOB_RC" = 0 ] || fail "pipeline v$v: job exit $JOB_RC"
    check_p2p $v
    echo "ok: profiler v$v: a pipeline's sends and receives $([ $v = 5 ] && echo "followed, exact" || echo "never called exact")"
done

# A communicator with both (a group of an all_reduce and a ring send/recv each step, on the fake GPU): with v5 every
# count exact at the end; with v4 its sends and receives take CUDA events, so its counts are never called exact.
for v in 5 4; do
    rm -rf "$NCCLWATCH_DIR"
    FAKE_NCCL_PROFILER_VERSION=$v run_job 2 --fake-cuda --group --steps 20 --count 4096
    [ "$JOB_RC" = 0 ] || fail "group v$v: job exit $JOB_RC"
    want=$([ $v = 5 ] && echo True || echo False)
    for f in "$(job_dir)"/rank*.ncw; do
        "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump $f"
        json_get "$WORK/dump.json" "[(c['gpu_source'], c['progress_exact']) for c in d['comms'] if c['p2p_sends']][0]" |
            grep -qx "('nccl-profiler', $want)" || fail "group v$v: $f: want nccl-profiler, exact $want"
    done
    echo "ok: profiler v$v: collectives and sends/receives on one communicator: exact $want"
done

rm -rf "$NCCLWATCH_DIR"
NCCLWATCH_PROFILER=off run_job 2 --steps 5
[ "$JOB_RC" = 0 ] || fail "off: job exit $JOB_RC"
check_files none 0 0
grep -q "NCCLWATCH_PROFILER=off" "$WORK/launch.err" && fail "the user's own NCCLWATCH_PROFILER=off echoed on stderr"
echo "ok: NCCLWATCH_PROFILER=off"

rm -rf "$NCCLWATCH_DIR"
NCCL_PROFILER_PLUGIN=/opt/inspector/libnccl-profiler-inspector.so run_job 2 --steps 5
[ "$JOB_RC" = 0 ] || fail "user plugin: job exit $JOB_RC"
grep -q "NCCL_PROFILER_PLUGIN=/opt/inspector/libnccl-profiler-inspector.so is set: ncclwatch keeps that plugin" \
    "$WORK/launch.err" || fail "no word that the user's plugin is kept"
[ "$(grep -c "is set: ncclwatch keeps that plugin" "$WORK/launch.err")" = 1 ] ||
    fail "the user's plugin said $(grep -c "is set: ncclwatch keeps that plugin" "$WORK/launch.err") times on one node"
check_files none 0 0
echo "ok: a plugin the user set is kept"

rm -rf "$NCCLWATCH_DIR"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000
waiting_ranks_say_rank2 "skip"
for f in "$(job_dir)"/rank[013]-*.ncw; do
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump $f"
    "$PY" - "$WORK/dump.json" <<'EOF' || fail "$f: see above"
import json, sys
c = [c for c in json.load(open(sys.argv[1]))["comms"] if c["coll_issued"] > 0][0]
# Inside #10, proven: its GPU started it (reached 10) and has not finished it (completed 9, exact).
if (c["coll_issued"], c["coll_reached"], c["coll_completed"], c["progress_exact"]) != (10, 10, 9, True):
    sys.exit(f"issued/reached/completed/exact {c['coll_issued']}/{c['coll_reached']}/{c['coll_completed']}/"
             f"{c['progress_exact']}, want 10/10/9/True")
EOF
done
echo "ok: NOT_JOINED under the profiler, the waiting ranks proven inside #10"

# A pipeline stage away before its send, under the v5 profiler: the waits are exact, and the stage NOT_JOINED.
rm -rf "$NCCLWATCH_DIR"
launch_job 4 --pipeline --steps 10 --sleep-rank 2 --sleep-step 5 --sleep-ms 60000 --hold-ms 60000
waiting_ranks_say_rank2 pipeline
for f in "$(job_dir)"/rank[013]-*.ncw; do
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump $f"
    json_get "$WORK/dump.json" "[(c['gpu_source'], c['progress_exact']) for c in d['comms'] if c['p2p_sends'] + c['p2p_recvs']][0]" |
        grep -qx "('nccl-profiler', True)" || fail "pipeline: $f: the waits are not exact"
done
echo "ok: a pipeline stage away before its send: NOT_JOINED rank 2, the waits exact (NCCL's P2p events)"

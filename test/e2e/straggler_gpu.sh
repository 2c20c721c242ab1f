#!/bin/bash
# STRAGGLER on GPUs, over the test NCCL's profiler events (each collective's GPU start and end, through our plugin):
# rank 3 of 4 sleeps 20 ms before every step's all_reduce, so the other ranks wait for it inside each one. While the
# job runs, within 50 collectives, the straggler's own shim names it (a "straggler" event and a warning) and so does
# the live collector inside rank 0's shim; after the end, analyze names it too (exit 0: a straggler is not a hang).
# No other rank is named, and the same job without the late rank names nobody.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN FAKE_NCCL_PROFILER_VERSION NCCLWATCH_PROFILER
export NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
export NCCLWATCH_LOG_LEVEL=debug  # so that a dump request (said at debug level) would show below

# The straggler events of every report of the job: "FILE SEQ CULPRITS" per event.
straggler_events() {
    "$PY" - "$(job_dir)" <<'EOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.report.json"))):
    try:
        d = json.load(open(f))
    except ValueError:
        continue  # written atomically; a partial read is harmless
    for e in d.get("events", []):
        if e.get("type") == "straggler":
            v = e["verdicts"][0]
            print(os.path.basename(f), v["seq"], ",".join(map(str, v["culprits"])), v["kind"])
EOF
}
has_straggler_event() { straggler_events | grep -q "^rank3-"; }

launch_job 4 --steps 400 --count 1024 --late-rank 3 --late-ms 20
wait_for 30 has_straggler_event || fail "no straggler event from rank 3: $(straggler_events)"
kill -0 "$LAUNCH_PID" 2>/dev/null || fail "the job had ended before the straggler was named"
events=$(straggler_events)
echo "$events"
[ "$(echo "$events" | wc -l)" = 1 ] || fail "one straggler event expected (rank 3's own), got: $events"
read -r file seq culprits kind <<<"$events"
[ "$culprits" = 3 ] && [ "$kind" = STRAGGLER ] || fail "event names $culprits ($kind), want 3 (STRAGGLER)"
[ "$seq" -le 50 ] || fail "named after collective #$seq, want within 50"
grep -q "STRAGGLER: rank 3 .* is consistently last to arrive at collectives" "$WORK/launch.err" ||
    fail "no STRAGGLER line on stderr"
# The lateness is the sleep as the others feel it: 20 ms less whatever delays their own arrival (their loop after the
# last op; on a loaded 2-core machine 0.2 ms and more), never more than the sleep and its overshoot: 20 ms +- 10 %.
grep -Eq "spent the least time inside .* on its GPU: it arrives a median (1[89]|2[01])\.[0-9] ms" "$WORK/launch.err" ||
    fail "the lateness is not stated: $(grep -A2 STRAGGLER "$WORK/launch.err" | head -5)"
echo "ok: rank 3's shim named it at collective #$seq, while the job ran"

wait_for 30 grep -q "STRAGGLER" "$(job_dir)/live-report.txt" 2>/dev/null || fail "no STRAGGLER in the live report"
grep -q "STRAGGLER: rank 3 " "$(job_dir)/live-report.txt" || fail "live report: $(head -3 "$(job_dir)/live-report.txt")"
live_seq=$(json_get "$(job_dir)/live-report.json" "[v['seq'] for v in d['verdicts'] if v['kind']=='STRAGGLER'][0]")
echo "ok: the live collector named rank 3 at collective #$live_seq"
! grep -q "live collector asks for a dump" "$WORK/launch.err" || fail "a dump was asked for a straggler"

wait "$LAUNCH_PID"
JOB_RC=$?
LAUNCH_PID=""
[ "$JOB_RC" = 0 ] || fail "job exit $JOB_RC"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
rc=$?
[ "$rc" = 0 ] || fail "analyze exit $rc: a straggler alone is not a problem"
got=$(json_get "$WORK/analysis.json" \
    "sorted({(v['kind'], tuple(c['comm_rank'] for c in v['culprits'])) for v in d['verdicts']})")
[ "$got" = "[('STRAGGLER', (3,))]" ] || fail "analyze: $got, want one STRAGGLER naming rank 3"
echo "ok: analyze after the end names rank 3 only, exit 0"

rm -rf "$NCCLWATCH_DIR"
run_job 4 --steps 150 --count 1024
[ "$JOB_RC" = 0 ] || fail "clean job exit $JOB_RC"
[ -z "$(straggler_events)" ] || fail "a clean job named a straggler: $(straggler_events)"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json" || fail "analyze of the clean job"
got=$(json_get "$WORK/analysis.json" "[v['kind'] for v in d['verdicts']]")
[ "$got" = "[]" ] || fail "clean job: $got"
! grep -q STRAGGLER "$(job_dir)/live-report.txt" 2>/dev/null || fail "the live collector named a straggler"
echo "ok: the same job without the late rank names nobody"

# The 2x2 grid (tensor-parallel pairs {0,1} {2,3}, then data-parallel pairs {0,2} {1,3} each step), rank 1 20 ms late
# before each step's ops: a straggler of its tensor-parallel pair. In its data-parallel pair it arrives as late, but
# only because its tensor-parallel op ended late (its time outside NCCL before the data-parallel op is rank 3's):
# `analyze` names it on the tensor-parallel communicator alone.
rm -rf "$NCCLWATCH_DIR"
run_job 4 --steps 150 --count 1024 --grid 2 --late-rank 1 --late-ms 20
[ "$JOB_RC" = 0 ] || fail "grid job exit $JOB_RC"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json" || fail "analyze of the grid job"
got=$(json_get "$WORK/analysis.json" \
    "sorted((v['kind'], [c['comm_rank'] for c in v['culprits']], [c['nranks'] for c in d['comms'] if c['comm_id']==v['comm_id']][0], sorted(r['global_rank'] for c in d['comms'] if c['comm_id']==v['comm_id'] for r in c['ranks'])) for v in d['verdicts'])")
[ "$got" = "[('STRAGGLER', [1], 2, [0, 1])]" ] ||
    fail "grid: $got, want one STRAGGLER naming rank 1 on the tensor-parallel pair {0,1} only"
echo "ok: the grid's late rank named on its tensor-parallel pair, not on the data-parallel pair it reaches late"

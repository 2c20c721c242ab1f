#!/bin/bash
# The GPU gets stuck mid-burst (the fake libcuda holds the stream behind one "compute" item after op #1000), so the
# op it is stuck before is one that follows a sampled op without events of its own. The stall is reported for the
# communicator and the rank, and recovers once the GPU moves on. The verdict is printed, not judged: with the ops
# around the stuck one carrying no events, where the GPU stands is not known precisely.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=1 NCCLWATCH_RING_SIZE=4096
launch_job 1 --fake-cuda --steps 2000 --count 1024 --cuda-hold-step 1000 --hold-ms 60000
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "no stall report"
[ -e "$FAKE_CUDA_HOLD_FILE" ] || fail "the GPU was not held"
r=$(ls "$(job_dir)"/rank0-*.report.json)
dump_rank 0 || fail "cannot read rank 0's file"
comm=$(json_get "$WORK/rank0.json" "d['comms'][0]['comm_id']")
stall="[e for e in d['events'] if e['type'] == 'stall'][0]"
[ "$(json_get "$r" "${stall}['comm_id']")" = "$comm" ] || fail "the stall is not reported for communicator $comm"
[ "$(json_get "$r" "${stall}['verdicts'][0]['comm_id']")" = "$comm" ] || fail "the verdict is not about $comm"
echo "verdict: $(json_get "$r" "${stall}['verdicts'][0]['kind']") at #$(json_get "$r" "${stall}['verdicts'][0]['seq']")," \
    "culprits $(json_get "$r" "${stall}['verdicts'][0]['culprits']"): $(json_get "$r" "${stall}['verdicts'][0]['summary']")"
echo "evidence: $(json_get "$r" "${stall}['verdicts'][0]['evidence']")"
wait_for 10 grep -q "STALL on communicator $comm (1 ranks; this process is rank 0)" "$WORK/launch.err" ||
    fail "the stderr report does not name communicator $comm and rank 0"

rm -f "$FAKE_CUDA_HOLD_FILE"
wait_for 30 json_get_true "$r" "any(e['type'] == 'recovered' and e['comm_id'] == '$comm' for e in d['events'])" ||
    fail "no recovery reported"
wait_for 30 rank_settled 0 2000 || fail "not every op completed after the release"
echo "ok: stall reported for communicator $comm, rank 0; recovered after the release"

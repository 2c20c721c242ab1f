#!/bin/bash
# A GPU stuck in work before an all_reduce (the fake libcuda holds the stream behind one "compute" item): the op
# issued after a pause is sampled, its "reached" event does not complete, and the watchdog names GPU_NOT_REACHED for
# the rank and the op. Once the GPU moves on, the stall is reported recovered.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=1
# Steps 0 and 1 run; then a 300 ms pause (the poller completes #2 by a catch-up event meanwhile), the GPU is held,
# and step 2's all_reduce (#3) is issued: after a pause, it is sampled.
launch_job 1 --fake-cuda --steps 3 --sleep-rank 0 --sleep-step 2 --sleep-ms 300 --cuda-hold-step 2 --hold-ms 60000
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "no stall report"
[ -e "$FAKE_CUDA_HOLD_FILE" ] || fail "the GPU was not held"
r=$(ls "$(job_dir)"/rank0-*.report.json)
stall="[e for e in d['events'] if e['type'] == 'stall'][0]"
v=$(json_get "$r" "${stall}['verdicts'][0]")
[ "$(json_get "$r" "${stall}['verdicts'][0]['kind']")" = GPU_NOT_REACHED ] || fail "verdict $v, want GPU_NOT_REACHED"
[ "$(json_get "$r" "${stall}['verdicts'][0]['culprits']")" = "[0]" ] || fail "culprits in $v, want [0]"
[ "$(json_get "$r" "${stall}['verdicts'][0]['seq']")" = 3 ] || fail "seq in $v, want 3"
wait_for 10 grep -q "GPU_NOT_REACHED" "$WORK/launch.err" || fail "the stderr report does not say GPU_NOT_REACHED"
dump_rank 0 || fail "cannot read rank 0's file"
eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce' and r['seq'] == 3")"
[ "$KEPT" = 1 ] && [ "$FOLLOWED" = 0 ] && [ "$NOT_DONE" = 1 ] || fail "#3: want one sampled record, not done"

rm -f "$FAKE_CUDA_HOLD_FILE"  # the GPU finishes the compute and the all_reduce
wait_for 30 json_get_true "$r" "any(e['type'] == 'recovered' for e in d['events'])" || fail "no recovery reported"
grep -q "RECOVERED" "$WORK/launch.err" || fail "the stderr does not say RECOVERED"
wait_for 30 rank_settled 0 3 || fail "#3 did not complete after the release"
echo "ok: GPU_NOT_REACHED for rank 0 at #3 while the GPU was held; recovered after the release"

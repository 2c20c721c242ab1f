#!/bin/bash
# Rank 1 all-reduces half as many elements at one step. The fake NCCL, like the real one, completes it silently;
# the watchdog reports the MISMATCH while the job runs, naming rank 1, without waiting for a stall.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=60
launch_job 4 --steps 10 --count 1048576 --mismatch-rank 1 --mismatch-step 3 --mismatch-kind count --hold-ms 60000

wait_for 30 has_files '*.report.json' 1 || fail "no mismatch report"
r=$(ls "$(job_dir)"/*.report.json | head -1)
kind=$(json_get "$r" "d['events'][0]['verdicts'][0]['kind']")
culprits=$(json_get "$r" "d['events'][0]['verdicts'][0]['culprits']")
seq=$(json_get "$r" "d['events'][0]['verdicts'][0]['seq']")
[ "$kind" = MISMATCH ] || fail "verdict $kind, want MISMATCH"
[ "$culprits" = "[1]" ] || fail "culprits $culprits, want [1]"
[ "$seq" = 4 ] || fail "seq $seq, want 4 (step 3 is the 4th all_reduce)"
# The report's file is written before its lines reach stderr: waited for, as a reader of the log would.
odd_rank_said() { grep -q "MISMATCH.*rank 1 issued AllReduce (float32, 524288 elements" "$WORK/launch.err"; }
wait_for 10 odd_rank_said || fail "the stderr report does not describe the odd rank"
echo "ok: MISMATCH at #4 names rank 1"

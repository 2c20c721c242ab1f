#!/bin/bash
# A teardown that hangs (issue 25): after a clean run, rank 2's ncclCommDestroy does not return for 8 s (the test
# NCCL holds it, FAKE_NCCL_DESTROY_HOLD_*). Nothing is outstanding and no collective stalls, yet rank 2's shim reports
# TEARDOWN_HANG naming rank 2 and the call within the timeout plus a poll, writes a dump, and analyze of the folder
# while it hangs says the same; once the call returns the job ends normally (exit 0).
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_DESTROY_HOLD_MS=8000 FAKE_NCCL_DESTROY_HOLD_RANK=2
launch_job 4 --steps 5

wait_for 30 has_files 'rank2-*.report.json' 1 || fail "rank 2 reported nothing"
r=$(ls "$(job_dir)"/rank2-*.report.json)
ev="[e for e in d['events'] if e['type']=='teardown_hang'][0]"
[ "$(json_get "$r" "$ev['call']")" = CommDestroy ] || fail "the event: $(json_get "$r" "$ev")"
[ "$(json_get "$r" "$ev['verdicts'][0]['kind']")" = TEARDOWN_HANG ] || fail "the verdict: $(json_get "$r" "$ev['verdicts']")"
[ "$(json_get "$r" "$ev['verdicts'][0]['culprits']")" = "[2]" ] || fail "culprits: $(json_get "$r" "$ev['verdicts'][0]")"
wait_for 10 grep -q "TEARDOWN_HANG: rank 2 (.*) has been inside the teardown of communicator .* for [0-9.]* s" "$WORK/launch.err" ||
    fail "stderr: $(grep -m2 '^\[ncclwatch' "$WORK/launch.err")"
wait_for 10 has_files 'rank2-*.dump.json' 1 || fail "rank 2 wrote no dump"
"$NCW_COLLECTOR" analyze --timeout 2 "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 2 (.*) has been inside the teardown of communicator" ||
    fail "analyze while it hangs: $(head -1 "$WORK/analysis.txt")"
grep -q "ncclCommDestroy" "$WORK/analysis.txt" || fail "analyze does not name the call"
wait "$LAUNCH_PID"
rc=$?
LAUNCH_PID=""
[ $rc = 0 ] || fail "the job did not end normally once the teardown returned (exit $rc)"
echo "ok: rank 2's hung ncclCommDestroy named"

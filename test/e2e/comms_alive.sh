#!/bin/bash
# 200 communicators alive at once (more than the rank file's 64 comm slots), rank 2 skips an all_reduce on the last
# one: the stall is reported live by the waiting ranks and by analyze (from the ring), and both say the communicator
# had no slot.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --steps 10 --alive-comms 200 --skip-rank 2 --skip-step 5 --hold-ms 60000

wait_for 60 has_files '*.report.json' 3 || fail "no report from the three waiting ranks"
for r in "$(job_dir)"/rank[013]-*.report.json; do
    kind=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
    culprits=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
    no_slot=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['no_comm_slot']")
    [ "$kind" = NOT_JOINED ] || fail "$r: verdict $kind, want NOT_JOINED"
    [ "$culprits" = "[2]" ] || fail "$r: culprits $culprits, want [2]"
    [ "$no_slot" = True ] || fail "$r: the stall event does not say the communicator had no slot"
done
wait_for 10 grep -q "more than 64 live communicators" "$WORK/launch.err" || fail "the overflow was not logged"

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "collector analyze exit $rc, want 1 (hang found)"
grep -q "NOT_JOINED" "$WORK/analysis.txt" || fail "collector analyze does not say NOT_JOINED"
grep -q "had no comm slot" "$WORK/analysis.txt" || fail "collector analyze does not say the communicator had no slot"
echo "ok: a stall on the 200th live communicator is reported live and by analyze"

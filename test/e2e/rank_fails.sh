#!/bin/bash
# Errors are failures, and the causal order after them (issue 14), 4 ranks: each case checks the culprit and kind
# live and with analyze once every process has ended.
#   a hang ended by the test NCCL's error return (a call that failed is never completed: analyze still names it);
#   SIGKILL of one rank at a random moment, repeated; SIGKILL of every rank at once with no hang (not a hang);
#   an init that rank 3 never enters (the others time out in it and exit).
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
export FAKE_NCCL_TIMEOUT_SEC=4

launcher_done() { ! kill -0 "$LAUNCH_PID" 2>/dev/null; }
job_ended() {
    wait_for "$1" launcher_done || fail "$2: the job did not end"
    wait "$LAUNCH_PID" 2>/dev/null
    LAUNCH_PID=""
}
has_event() { [ "$(json_get "$1" "len([e for e in d['events'] if e['type']=='$2'])" 2>/dev/null)" -gt 0 ] 2>/dev/null; }
# waits (10 s at most) until FILE has an event of TYPE whose lead verdict is WANT; LEAD is what it last read
lead_is() {
    LEAD=$(live_lead "$1" "$2" 2>/dev/null)
    [ "$LEAD" = "$3" ]
}
live_lead() {  # FILE EVENT_TYPE -> "KIND [CULPRITS]"
    json_get "$1" "[e for e in d['events'] if e['type']=='$2'][0]['verdicts'][0]['kind'] + ' ' + str([e for e in d['events'] if e['type']=='$2'][0]['verdicts'][0]['culprits'])"
}
offline() {  # analyze --json over the job folder; sets RC
    wait_for 10 ranks_gone || fail "the ranks' processes did not end"
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/a.json" 2>"$WORK/a.err"
    RC=$?
}
offline_lead() { json_get "$WORK/a.json" "(d['verdicts'][0]['kind'] + ' ' + str([c['comm_rank'] for c in d['verdicts'][0]['culprits']])) if d['verdicts'] else 'none'"; }
pid_of_rank() { ls "$(job_dir)"/rank$1-*.ncw 2>/dev/null | sed -n 's/.*-\([0-9]*\)\.ncw$/\1/p' | head -1; }

# 1. A hang ended by NCCL's error return: rank 3 is busy outside NCCL for 9 s before all_reduce #5; the others wait
# in it until the test NCCL gives up after 4 s (ncclSystemError) and exit(3). Live: NOT_JOINED rank 3 at 2 s.
# After the end the failed calls are outstanding with their error, not completed: analyze still names rank 3.
launch_job 4 --steps 6 --sleep-rank 3 --sleep-step 4 --sleep-ms 9000
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "error return: no live report"
r=$(ls "$(job_dir)"/rank0-*.report.json)
wait_for 10 lead_is "$r" stall "NOT_JOINED [3]" || fail "error return: live verdict '$LEAD', want NOT_JOINED [3]"
job_ended 60 "error return"
f=$(ls "$(job_dir)"/rank0-*.ncw)
"$NCW_COLLECTOR" dump --json "$f" >"$WORK/d0.json" || fail "error return: rank 0's file unreadable"
failed=$(json_get "$WORK/d0.json" "[c['ops_failed'], c['first_failed_seq'], c['first_failed_result'], c['coll_completed']] if (c := d['comms'][0]) else 0")
[ "$failed" = "[1, 5, 2, 4]" ] || fail "error return: rank 0's slot says [ops_failed, first_failed_seq, result, completed] = $failed, want [1, 5, 2, 4]"
offline
lead=$(offline_lead)
[ "$RC" = 1 ] || fail "error return: analyze exit $RC once the job ended, want 1 (a hang): $(head -c 2000 "$WORK/a.json")"
[ "$lead" = "NOT_JOINED [3]" ] || fail "error return: analyze's lead verdict '$lead', want NOT_JOINED [3]"
echo "ok: a hang ended by an NCCL error: NOT_JOINED rank 3 live and offline; the failed call is recorded failed"

# 2. SIGKILL of rank 1 at a random moment of a running job, three times: DEAD rank 1, live and offline.
for i in 1 2 3; do
    rm -rf "$NCCLWATCH_DIR"
    launch_job 4 --steps 400 --late-rank 0 --late-ms 5 --hold-ms 60000
    wait_for 30 has_files '*.ncw' 4 || fail "sigkill $i: not every rank has a file"
    sleep "0.$((RANDOM % 8 + 2))"  # the random moment the test is about, not a wait for a condition
    victim=$(pid_of_rank 1)
    kill -KILL "$victim" || fail "sigkill $i: no rank 1 to kill"
    wait_for 30 has_files 'rank0-*.report.json' 1 || fail "sigkill $i: no live report"
    r=$(ls "$(job_dir)"/rank0-*.report.json)
    wait_for 10 lead_is "$r" stall "DEAD [1]" || fail "sigkill $i: live verdict '$LEAD', want DEAD [1]"
    job_ended 60 "sigkill $i"
    offline
    lead=$(offline_lead)
    [ "$lead" = "DEAD [1]" ] || fail "sigkill $i: analyze's lead verdict '$lead', want DEAD [1]: $(head -c 2000 "$WORK/a.json")"
done
echo "ok: rank 1 SIGKILLed at a random moment, three times: DEAD rank 1 live and offline"

# 3. Every rank SIGKILLed at once while the job runs, no hang: not called a hang.
rm -rf "$NCCLWATCH_DIR"
launch_job 4 --steps 400 --late-rank 0 --late-ms 5
wait_for 30 has_files '*.ncw' 4 || fail "all killed: not every rank has a file"
sleep 0.5  # let it run: the moment of the kill is the point
kill -KILL -- "-$LAUNCH_PID"
job_ended 10 "all killed"
offline
lead=$(offline_lead)
[ "$RC" = 0 ] || fail "all killed: analyze exit $RC, want 0 (no hang): $lead"
grep -q "killed together" "$WORK/a.json" "$WORK/a.err" || fail "all killed: analyze does not say the ranks were killed together"
echo "ok: every rank killed at once: analyze finds no hang and says they were killed together"

# 4. Init that rank 3 never enters: the others wait in it, time out and exit; analyze names rank 3 after the end.
rm -rf "$NCCLWATCH_DIR"
launch_job 4 --steps 2 --no-init-rank 3 --hold-ms 6000
wait_for 30 has_files 'rank0-*.report.json' 1 || fail "init: no live report"
r=$(ls "$(job_dir)"/rank0-*.report.json)
wait_for 10 has_event "$r" init_hang || fail "init: rank 0 reported no init hang"
job_ended 60 "init"
offline
lead=$(offline_lead)
[ "$RC" = 1 ] || fail "init: analyze exit $RC once the job ended, want 1"
[ "$lead" = "INIT_HANG [3]" ] || fail "init: analyze's lead verdict '$lead', want INIT_HANG [3]: $(head -c 2000 "$WORK/a.json")"
echo "ok: init hang: rank 3 never entered, named by analyze after the job is gone"

#!/bin/bash
# Two communicators of every rank used in different orders (issue 25): each step all-reduces on the world (A), then on
# B; at step 5 rank 3 does B first. Ranks 0-2 wait in A's #6 for rank 3, rank 3 waits in B's #6 for them. Every
# report (each shim's, analyze after the end) leads with one DEADLOCK naming rank 3 and both communicators; the two
# stalls follow it as its consequences.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --steps 10 --swap-rank 3 --swap-step 5

every_stall_led_by 4 DEADLOCK "[3]"
for r in "$(job_dir)"/rank*-*.report.json; do
    [ "$(json_get "$r" "len([e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['cycle'])")" = 2 ] ||
        fail "$r: the cycle is not of 2 stalls: $(stall_lead "$r" cycle)"
done
grep -q "DEADLOCK: deadlock across communicators: rank 3 (.*) waits in AllReduce #6 on communicator 0x[0-9a-f]* for ranks 0-2, which wait in AllReduce #6 on communicator 0x[0-9a-f]* for it: they issued their ops on these communicators in different orders" \
    "$WORK/launch.err" || fail "the stderr report does not name the cycle: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
# The report's first line is the DEADLOCK; no report leads with either stall on its own: each is said as a consequence.
grep -m1 "^\[ncclwatch r" "$WORK/launch.err" | grep -q "\] DEADLOCK: " ||
    fail "the first line is not the deadlock: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
grep -Eq "^\[ncclwatch r[0-9]+\] +(NOT_JOINED|EXTRA_OP): .*a consequence, not the cause: the deadlock" "$WORK/launch.err" ||
    fail "the stalls are not said as the deadlock's consequences: $(grep -c '^\[ncclwatch' "$WORK/launch.err") lines"
if grep -E "^\[ncclwatch r[0-9]+\] +(NOT_JOINED|EXTRA_OP):" "$WORK/launch.err" |
    grep -v "a consequence, not the cause: the deadlock" | grep -q .; then
    fail "a stall is reported as its own cause: $(grep -E '\] +(NOT_JOINED|EXTRA_OP):' "$WORK/launch.err" | head -2)"
fi

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "collector analyze exit $rc, want 1 (hang found)"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  deadlock across communicators: rank 3 " ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
[ "$(json_get "$WORK/analysis.json" "d['verdicts'][0]['kind']")" = DEADLOCK ] || fail "analyze --json leads otherwise"
echo "ok: the deadlock across two communicators named, rank 3 the odd order"

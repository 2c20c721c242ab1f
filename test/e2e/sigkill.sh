#!/bin/bash
# Rank 1 is killed with SIGKILL mid-run: its file stays readable, and the others name it DEAD.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 3 --steps 10 --die-rank 1 --die-step 4 --hold-ms 60000
wait_for 30 has_files '*.report.json' 2 || fail "no report from the surviving ranks"
r=$(ls "$(job_dir)"/rank0-*.report.json)
kind=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
culprits=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
[ "$kind" = DEAD ] || fail "verdict $kind, want DEAD"
[ "$culprits" = "[1]" ] || fail "culprits $culprits, want [1]"
f=$(ls "$(job_dir)"/rank1-*.ncw)
"$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "the killed rank's file is not readable"
n=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op']=='AllReduce'])")
[ "$n" = 4 ] || fail "the killed rank's file holds $n all_reduces, want 4"
echo "ok: SIGKILLed rank 1 named DEAD, its file read back with 4 all_reduces"

#!/bin/bash
# Rank 2 of 4 skips one all_reduce and stays alive outside NCCL: the others wait in the last all_reduce. Every
# rank's file exists, and the report names rank 2 and the sequence number within the timeout plus one second, in
# full once on the node's stderr (issue 16: one report per node).
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000

wait_for 30 has_files '*.report.json' 3 || fail "no report from the three waiting ranks"
has_files '*.ncw' 4 || fail "not every rank has a rank file"
for r in "$(job_dir)"/rank[013]-*.report.json; do
    v=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]")
    kind=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['kind']")
    culprits=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['culprits']")
    seq=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['seq']")
    waited=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['stalled_for_s']")
    [ "$kind" = NOT_JOINED ] || fail "$r: verdict $kind, want NOT_JOINED: $v"
    [ "$culprits" = "[2]" ] || fail "$r: culprits $culprits, want [2]"
    [ "$seq" = 10 ] || fail "$r: seq $seq, want 10"
    "$PY" -c "import sys; sys.exit(0 if 2.0 <= $waited <= 3.0 else 1)" || fail "$r: reported after $waited s"
done
grep -q "NOT_JOINED: rank 2 (.*) never issued AllReduce #10 on communicator" "$WORK/launch.err" ||
    fail "the stderr report's verdict line does not name rank 2 as analyze does"
grep -q "rank 2 is behind: completed #9, never issued #10" "$WORK/launch.err" ||
    fail "the stderr report does not name rank 2 in plain words"
# One full report per node: rank 0, the lowest local rank of the three that wait, prints it; ranks 1 and 3 print
# one line that points to it.
full=$(grep -c "rank 2 is behind: completed #9, never issued #10" "$WORK/launch.err")
[ "$full" = 1 ] || fail "$full full stall reports on stderr, want 1 (one per node)"
[ "$(grep -c "NOT_JOINED: rank 2 .*\[the full report: local rank 0 (pid [0-9]*) on this host, in its stderr and .*rank0-.*\.report\.json\]" "$WORK/launch.err")" = 2 ] ||
    fail "ranks 1 and 3 do not point to rank 0's report: $(grep "the full report" "$WORK/launch.err")"
# The lagging rank is not stalled itself; a sibling asks it for its dump.
wait_for 10 has_files 'rank2-*.dump.json' 1 || fail "rank 2 wrote no dump"
# The shim's report and dump carry the version (the collector's, the same build), their times RFC 3339 with the zone
# (lib.sh validates every JSON against docs/schemas/ at the end).
version=$("$NCW_COLLECTOR" --version | sed 's/^ncclwatch //')
for f in "$(job_dir)"/rank0-*.report.json "$(job_dir)"/rank2-*.dump.json; do
    got=$(json_get "$f" "d['ncclwatch_version']")
    [ "$got" = "$version" ] || fail "$f: ncclwatch_version '$got', want '$version'"
done
json_get "$(job_dir)"/rank0-*.report.json "d['events'][0]['time']" |
    grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{2}:[0-9]{2}$' ||
    fail "the report's time is not RFC 3339: $(json_get "$(job_dir)"/rank0-*.report.json "d['events'][0]['time']")"

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "collector analyze exit $rc, want 1 (hang found)"
grep -q "NOT_JOINED" "$WORK/analysis.txt" || fail "collector analyze does not say NOT_JOINED"
head -2 "$WORK/analysis.txt" | grep -Eq "since [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}[+-][0-9]{2}:[0-9]{2}" ||
    fail "analyze's verdict line gives no RFC 3339 time: $(head -1 "$WORK/analysis.txt")"
grep -q "the ranks' stall timeout 2 s (NCCLWATCH_TIMEOUT_SEC)" "$WORK/analysis.txt" ||
    fail "analyze's header does not state the ranks' timeout: $(sed -n 2p "$WORK/analysis.txt")"
echo "ok: rank 2 named NOT_JOINED at #10"

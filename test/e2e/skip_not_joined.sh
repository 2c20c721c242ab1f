#!/bin/bash
# Rank 2 of 4 skips one all_reduce and stays alive outside NCCL: the others wait in the last all_reduce. Every
# rank's file exists, and the report names rank 2 and the sequence number within the timeout plus one second, in
# full once on the node's stderr (issue 16: one report per node), its first line the verdict. The other ranks point
# to it: in their report files, and on stderr with one line each where each rank has a log of its own (quiet by
# default: nothing where they share the reporter's).
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
ncw_lines "$WORK/launch.err" | head -1 | grep -q "^\[ncclwatch r0\] NOT_JOINED: rank 2 (.*) never issued AllReduce #10 on communicator" ||
    fail "the stderr report's first line does not name rank 2 as analyze does: $(ncw_lines "$WORK/launch.err" | head -1)"
grep -q "rank 2 is behind: completed #9, never issued #10" "$WORK/launch.err" ||
    fail "the stderr report does not name rank 2 in plain words"
# One full report per node: rank 0, the lowest local rank of the three that wait, prints it; ranks 1 and 3 share
# its stderr here and say nothing; their report files point to rank 0's.
full=$(grep -c "rank 2 is behind: completed #9, never issued #10" "$WORK/launch.err")
[ "$full" = 1 ] || fail "$full full stall reports on stderr, want 1 (one per node)"
others=$(ncw_lines "$WORK/launch.err" | grep -vc "^\[ncclwatch r0\] ")
[ "$others" = 0 ] || fail "ranks other than the reporter printed $others line(s): $(ncw_lines "$WORK/launch.err" | grep -v '^\[ncclwatch r0\] ')"
[ "$(json_get "$(job_dir)"/rank0-*.report.json "[e for e in d['events'] if e['type']=='stall'][0]['full_report']")" = None ] ||
    fail "rank 0's report points elsewhere"
for r in "$(job_dir)"/rank[13]-*.report.json; do
    got=$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['full_report']")
    json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['full_report']['report_json']" |
        grep -q "/rank0-.*\.report\.json$" || fail "$r does not point to rank 0's report: $got"
    [ "$(json_get "$r" "[e for e in d['events'] if e['type']=='stall'][0]['full_report']['local_rank']")" = 0 ] ||
        fail "$r does not point to local rank 0: $got"
done
# The lagging rank is not stalled itself; a sibling asks it for its dump. The node's dumps are said once, by the
# reporter, when every rank asked wrote one.
wait_for 10 has_files 'rank2-*.dump.json' 1 || fail "rank 2 wrote no dump"
wait_for 10 grep -q "dumps written (stall)" "$WORK/launch.err" || fail "the node's dumps are not said"
[ "$(grep -c "dumps* written" "$WORK/launch.err")" = 1 ] || fail "dumps said more than once: $(grep "dumps* written" "$WORK/launch.err")"
grep -q "^\[ncclwatch r0\] dumps written (stall): all 4 ranks of this host, .*/rank\*-.*-\*\.dump\.json$" "$WORK/launch.err" ||
    fail "the node's dump line: $(grep "dumps* written" "$WORK/launch.err")"
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

# Each rank with a log of its own (torchrun --redirects): rank 0's has the full report, ranks 1 and 3 one line each
# that points to it, rank 2 (not stalled) nothing.
stop_job
rm -rf "$NCCLWATCH_DIR"
launch_job_own_stderr 4 --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 30 has_files '*.report.json' 3 || fail "own logs: no report from the three waiting ranks"
wait_for 10 grep -q "dumps written" "$WORK/rank0.err" || fail "own logs: rank 0 did not say the node's dumps"
grep -q "rank 2 is behind: completed #9, never issued #10" "$WORK/rank0.err" || fail "own logs: rank 0 has no full report"
for r in 1 3; do
    [ "$(ncw_lines "$WORK/rank$r.err" | wc -l)" = 1 ] ||
        fail "own logs: rank $r said $(ncw_lines "$WORK/rank$r.err" | wc -l) lines, want 1: $(ncw_lines "$WORK/rank$r.err")"
    grep -q "^\[ncclwatch r$r\] NOT_JOINED: rank 2 .*\[the full report: local rank 0 (pid [0-9]*) on this host, in its stderr and .*rank0-.*\.report\.json\]$" "$WORK/rank$r.err" ||
        fail "own logs: rank $r does not point to rank 0's report: $(cat "$WORK/rank$r.err")"
done
[ "$(ncw_lines "$WORK/rank2.err" | wc -l)" = 0 ] || fail "own logs: rank 2 said: $(ncw_lines "$WORK/rank2.err")"
echo "ok: rank 2 named NOT_JOINED at #10; one full report on the node, one pointer per rank in logs of their own"

#!/bin/bash
# The story after the end (issue 24): what happened and was over by the end is told by `analyze` from the shims'
# events (.report.json) and the rank files' init times, and leads its report when nothing is hung.
#   A. Rank 1 sleeps 3.5 s before step 4's collectives (timeout 2 s): a stall, reported live, that recovers; the job
#      ends cleanly. After the end: exit 0, first line "recovered: rank 1 held AllReduce #N for S s".
#   B. Rank 3 begins its init 3.5 s after the others: INIT_HANG live; after the end: exit 0, first line "init of
#      communicator ... waited S s for rank 3, which began its init S s after the first".
#   C. A clean job: the story is empty, the first line "OK ... no hang and no mismatch".
#   D. The stall of A, then a real hang at the end (rank 2 skips an all_reduce later): the verdict at the end leads
#      (exit 1), and the recovered stall is still told under "Before the end".
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_SUSPECT=0

after() {  # after NAME: analyze's text and JSON after the end into $WORK/NAME.txt, .json; ANALYZE_RC its status
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/$1.txt"
    ANALYZE_RC=$?
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/$1.json"
}

# ---- A ----
run_job 2 --steps 8 --count 4096 --sleep-rank 1 --sleep-step 4 --sleep-ms 3500
[ "$JOB_RC" = 0 ] || fail "A: the job failed (exit $JOB_RC)"
grep -q "RECOVERED" "$WORK/launch.err" || fail "A: the stall was not reported as recovered live"
after a
[ "$ANALYZE_RC" = 0 ] || { cat "$WORK/a.txt" >&2; fail "A: analyze exit $ANALYZE_RC, want 0 (nothing is hung)"; }
head -1 "$WORK/a.txt" | grep -q "^OK *recovered: rank 1 held AllReduce #[0-9]* for [34]\.[0-9] s; nothing is hung at the end" ||
    { cat "$WORK/a.txt" >&2; fail "A: the first line is not the recovered stall"; }
[ "$(json_get "$WORK/a.json" "[s['kind'] for s in d['story']]")" = "['recovered']" ] ||
    fail "A: the story is $(json_get "$WORK/a.json" "[s['line'] for s in d['story']]"), want one recovered stall"
[ "$(json_get "$WORK/a.json" "d['problem_found']")" = False ] || fail "A: analyze --json says a problem was found"
echo "ok A: $(head -1 "$WORK/a.txt" | sed 's/  */ /g')"

# ---- B ----
rm -rf "$NCCLWATCH_DIR"
run_job 4 --steps 3 --count 4096 --init-late-rank 3 --init-late-ms 3500
[ "$JOB_RC" = 0 ] || fail "B: the job failed (exit $JOB_RC)"
grep -q "INIT_HANG" "$WORK/launch.err" || fail "B: the late init was not reported live"
after b
[ "$ANALYZE_RC" = 0 ] || { cat "$WORK/b.txt" >&2; fail "B: analyze exit $ANALYZE_RC, want 0"; }
head -1 "$WORK/b.txt" |
    grep -q "^OK *init of communicator 0x[0-9a-f]* (world, 4 ranks) waited [34]\.[0-9] s for rank 3, which began its init [34]\.[0-9] s after the first; nothing is hung at the end" ||
    { cat "$WORK/b.txt" >&2; fail "B: the first line is not the init that waited for rank 3"; }
[ "$(json_get "$WORK/b.json" "d['story'][0]['kind']")" = init_waited ] || fail "B: analyze --json: no init_waited"
echo "ok B: $(head -1 "$WORK/b.txt" | sed 's/  */ /g')"

# ---- C ----
rm -rf "$NCCLWATCH_DIR"
run_job 2 --steps 4 --count 4096
[ "$JOB_RC" = 0 ] || fail "C: the clean job failed (exit $JOB_RC)"
after c
[ "$ANALYZE_RC" = 0 ] || fail "C: analyze exit $ANALYZE_RC"
head -1 "$WORK/c.txt" | grep -q "^OK *no hang and no mismatch" || fail "C: first line $(head -1 "$WORK/c.txt")"
grep -q "^Before the end" "$WORK/c.txt" && fail "C: a clean job has a story: $(cat "$WORK/c.txt")"
[ "$(json_get "$WORK/c.json" "d['story']")" = "[]" ] || fail "C: a clean job's story is not empty"
echo "ok C: a clean job has no story"

# ---- D ----
rm -rf "$NCCLWATCH_DIR"
launch_job 2 --steps 12 --count 4096 --sleep-rank 1 --sleep-step 4 --sleep-ms 3500 --skip-rank 1 --skip-step 9 \
    --hold-ms 60000
# The second stall's report: a NOT_JOINED after the first one's RECOVERED.
has_hang_report() { awk '/RECOVERED/ { r = 1 } r && /NOT_JOINED/ { f = 1 } END { exit !f }' "$WORK/launch.err"; }
wait_for 40 has_hang_report || fail "D: the hang at step 9 was not reported after the first stall recovered"
stop_job
after d
[ "$ANALYZE_RC" = 1 ] || { cat "$WORK/d.txt" >&2; fail "D: analyze exit $ANALYZE_RC, want 1 (a hang)"; }
head -1 "$WORK/d.txt" | grep -q "^VERDICT *NOT_JOINED\|^VERDICT .*rank 1" || fail "D: first line $(head -1 "$WORK/d.txt")"
grep -A3 "^Before the end" "$WORK/d.txt" | grep -q "recovered: rank 1 held AllReduce #[0-9]* for [34]\.[0-9] s" ||
    { cat "$WORK/d.txt" >&2; fail "D: the recovered stall is not told under 'Before the end'"; }
echo "ok D: the hang at the end leads; the earlier recovered stall is told after it"

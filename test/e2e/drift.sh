#!/bin/bash
# A loop of same-shaped all_reduces with a broadcast every 10 steps, 4 ranks. NCCL (and the test NCCL) pairs the ops
# by their order, so when rank 3 skips one all_reduce, or adds one, the ranks drift by one op and disagree only at the
# next broadcast. The report names the drift, where it began, as one lead verdict (NOT_JOINED for the skip, EXTRA_OP
# for the extra op), with the MISMATCHes at the broadcast as its consequences: live (the shims' stderr and
# .report.json, the in-shim live collector's live-report.json) and with `analyze` once every process ended.
#
# Ops of the others: step 0: AllReduce #1, Broadcast #2; steps 1-9: #3..#11; step 10: #12, Broadcast #13; steps
# 11-19: #14..#22; step 20: #23, Broadcast #24; steps 21-29: #25..#33. Step 15's all_reduce is their #18.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
LOOP=(--steps 30 --count 4096 --bcast-every 10 --hold-ms 60000)

# The lead of a list of verdicts in a JSON file: "KIND CULPRITS SHIFT FIRST LAST REST_ARE_CONSEQUENCES", or
# "LEADS=n ..." when there is not exactly one verdict that is not a consequence.  lead_of FILE VERDICT_LIST_EXPR
lead_of() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
vs = eval(sys.argv[2], {'d': d})
leads = [v for v in vs if not v.get('consequence')]
if len(leads) != 1:
    print('LEADS=%d %s' % (len(leads), [(v['kind'], v['culprits']) for v in leads]))
    sys.exit(0)
v = leads[0]  # the lead comes first: every other verdict is a consequence of it
if vs[0] is not v:
    print('LEAD NOT FIRST')
    sys.exit(0)
dr = v.get('drift') or {}
culprits = [c['comm_rank'] if isinstance(c, dict) else c for c in v['culprits']]
# The first seq it may have begun at, with "w" when the window visible there begins at it ("at or before").
first = '%s%s' % (dr.get('first_seq'), 'w' if dr.get('from_window') else '')
print('%s %s %s %s %s %s' % (v['kind'], culprits, dr.get('shift'), first, dr.get('last_seq'),
                             all(x.get('consequence') for x in vs if x is not v)))
EOF
}
stall_verdicts="[e for e in d['events'] if e['type']=='stall'][0]['verdicts']"
has_lead() { [ -s "$1" ] && [ "$(lead_of "$1" "$2")" = "$3" ]; }
# The live collector sees each rank's 16 newest signatures per digest (kMaxDigestSigs), kept across digests: in a job
# this fast it may not see back to the broadcast before the drift (nor every op between digests), and then says "at
# or before" (from_window); otherwise its range must hold the true op (the others' #18 skipped, rank 3's #19 added).
# live_lead FILE KIND SHIFT TRUE_SEQ LAST
live_lead() {
    local kind culprits shift first last rest
    [ -s "$1" ] || return 1
    read -r kind culprits shift first last rest <<<"$(lead_of "$1" "d['verdicts']")"
    [ "$kind $culprits $shift $last $rest" = "$2 [3] $3 $5 True" ] || return 1
    case "$first" in
        *w) [ "${first%w}" -le "$5" ] ;;
        *) [ "$first" -ge 14 ] && [ "$first" -le "$4" ] ;;
    esac
}

# ---- Rank 3 skips step 15's all_reduce: it ends one op short, the others wait in #33 ----
launch_job 4 "${LOOP[@]}" --skip-rank 3 --skip-step 15
wait_for 30 has_files 'rank[012]-*.report.json' 3 || fail "skip: no stall report from the three waiting ranks"
for r in "$(job_dir)"/rank[012]-*.report.json; do
    wait_for 10 grep -q '"stall"' "$r" || fail "$r: no stall event"
    got=$(lead_of "$r" "$stall_verdicts")
    [ "$got" = "NOT_JOINED [3] 1 14 23 True" ] || fail "skip: $r: lead $got, want NOT_JOINED [3] shift 1 from #14..#23"
done
words="skipped one AllReduce between #14 and #23 on communicator .*: its #23..#32 are the others' #24..#33, which NCCL paired silently"
wait_for 10 grep -q "NOT_JOINED: rank 3 (.*) $words; 3 ranks wait in AllReduce #33.*, which it never issued" "$WORK/launch.err" ||
    fail "skip: the stderr report does not lead with the drift"
grep -q "MISMATCH: .* (a consequence, not the cause: rank 3 skipped one AllReduce between #14 and #23)" \
    "$WORK/launch.err" || fail "skip: the stderr report shows no MISMATCH as the drift's consequence"
# The live collector (in rank 0's shim) rewrites its report as verdicts come: the JSON is written after the text.
wait_for 30 live_lead "$(job_dir)/live-report.json" NOT_JOINED 1 18 23 ||
    fail "skip: live-report.json lead $(lead_of "$(job_dir)/live-report.json" "d['verdicts']")"
live_words="skipped one AllReduce \(between #1[4-8] and\|at or before\) #23 on communicator .*: its #23..#32 are the others' #24..#33"
grep -q "NOT_JOINED: rank 3 (.*) $live_words, which NCCL paired silently; 3 ranks wait" "$(job_dir)/live-report.txt" ||
    fail "skip: the live report does not lead with the drift: $(head -5 "$(job_dir)/live-report.txt")"
grep -q "#14..#23 are same-shaped ops\|the signatures before #[0-9]* are not all visible here" "$(job_dir)/live-report.txt" ||
    fail "skip: the live report does not say what it cannot see"
# Every process ended (all at once), then the files alone.
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/skip.json"
rc=$?
[ $rc = 1 ] || fail "skip: analyze exit $rc, want 1"
got=$(lead_of "$WORK/skip.json" "d['verdicts']")
[ "$got" = "NOT_JOINED [3] 1 14 23 True" ] || fail "skip: analyze lead $got"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/skip.txt"
# Killed all at once, the ranks are gone, and the hang is not called one after the fact (causal order, issue 14): the
# drift stands, in the same words.
grep -q "VERDICT  rank 3 (.*) $words" "$WORK/skip.txt" ||
    fail "skip: analyze does not say it in the same words: $(head -20 "$WORK/skip.txt")"
echo "ok: skip named as the drift's NOT_JOINED, live and offline"

# ---- The same skip, with every rank pausing 1.5 s after the broadcast where it shows ----
# The shims' once-a-second mismatch check then sees the MISMATCH at #24 before the ops after it are issued, as on a
# GPU, where the ranks go on at a step's pace: no shim may report that MISMATCH as its own verdict; it waits until
# the drift can be told (the ranks issue the ops after it), and the drift leads.
rm -rf "$NCCLWATCH_DIR"
launch_job 4 "${LOOP[@]}" --skip-rank 3 --skip-step 15 --pause-step 21 --pause-ms 1500
wait_for 30 has_files 'rank[012]-*.report.json' 3 || fail "paused skip: no stall report from the three waiting ranks"
wait_for 10 grep -q "NOT_JOINED: rank 3 (.*) $words" "$WORK/launch.err" || fail "paused skip: no drift reported"
! grep -q "^\[ncclwatch r[0-9]*\] MISMATCH: " "$WORK/launch.err" ||
    fail "paused skip: a MISMATCH reported as its own verdict: $(grep -m1 '\] MISMATCH: ' "$WORK/launch.err")"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
echo "ok: a skip seen at its first MISMATCH before the ops after it: the drift leads, no MISMATCH of its own"

# ---- Rank 3 adds an all_reduce after step 15's: it waits alone in #34 ----
rm -rf "$NCCLWATCH_DIR"
launch_job 4 "${LOOP[@]}" --extra-rank 3 --extra-step 15
wait_for 30 has_files 'rank3-*.report.json' 1 || fail "extra: no stall report from rank 3"
r=$(ls "$(job_dir)"/rank3-*.report.json)
wait_for 10 grep -q '"stall"' "$r" || fail "$r: no stall event"
got=$(lead_of "$r" "$stall_verdicts")
[ "$got" = "EXTRA_OP [3] -1 14 24 True" ] || fail "extra: $r: lead $got, want EXTRA_OP [3] shift -1 from #14..#24"
words="added one AllReduce between #14 and #24 on communicator .*: its #25..#34 are the others' #24..#33, which NCCL paired silently"
wait_for 10 grep -q "EXTRA_OP: rank 3 (.*) $words" "$WORK/launch.err" || fail "extra: the stderr report does not lead with the drift"
wait_for 30 live_lead "$(job_dir)/live-report.json" EXTRA_OP -1 19 24 ||
    fail "extra: live-report.json lead $(lead_of "$(job_dir)/live-report.json" "d['verdicts']")"
live_words="added one AllReduce \(between #1[4-9] and\|at or before\) #24 on communicator .*: its #25..#34 are the others' #24..#33"
grep -q "EXTRA_OP: rank 3 (.*) $live_words.*; it waits in AllReduce #34" "$(job_dir)/live-report.txt" ||
    fail "extra: the live report does not lead with the drift: $(head -5 "$(job_dir)/live-report.txt")"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/extra.json"
got=$(lead_of "$WORK/extra.json" "d['verdicts']")
[ "$got" = "EXTRA_OP [3] -1 14 24 True" ] || fail "extra: analyze lead $got"
echo "ok: extra op named as the drift's EXTRA_OP, live and offline"

# ---- every op one shape (no broadcast): nothing disagrees, and the job hangs at the end of the loop ----
# Rank 3 skips step 15's all_reduce of 30 (each step 40 ms of "compute"): its later ops pair silently with the
# others' next ones, and the others wait in #30, which it never issues. NOT_JOINED rank 3 at #30, and, from each
# rank's own pace, where the skip could have been: between its #15 and #16 (its gap there two steps).
rm -rf "$NCCLWATCH_DIR"
unset NCCLWATCH_COLLECTOR
launch_job 4 --steps 30 --count 4096 --step-ms 40 --skip-rank 3 --skip-step 15 --hold-ms 60000
stall_reported() { grep -q "NOT_JOINED: rank 3" "$WORK/launch.err"; }
wait_for 40 stall_reported || fail "same shape: no NOT_JOINED rank 3 reported"
pace="rank 3 may instead have skipped one AllReduce between its #15 and #16"
grep -q "$pace" "$WORK/launch.err" || fail "same shape: the stall report does not say '$pace'"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/pace.txt"
head -5 "$WORK/pace.txt" | grep -q "$pace" || { head -8 "$WORK/pace.txt" >&2; fail "same shape: analyze does not say '$pace'"; }
echo "ok: a skip among same-shaped ops located by the ranks' own pace, live and offline"

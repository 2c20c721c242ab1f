#!/bin/bash
# CPU run-ahead with the fake libcuda: the GPU is held behind one "compute" item while the rank enqueues a burst of
# N all_reduces on one stream (#1 is sampled; the others follow it). Then the GPU finishes #1..#C and sits in #C+1
# (the hold file's number: the stream's first C+1 items, compute included), later #1..#N-3, and at last everything.
# What the rank file says must be proven at each point (shim/record/comm_registry.h, StreamClaim: marks):
#   - completed (coll_completed, and the count ops_completed) never claims more than the GPU did: <= C; reached
#     <= C+1; no record past #C has a completion time, none past #C+1 a "reached" time;
#   - the exact bound of the marks: one every 16 followers (kMarkEveryOps) since the last mark or sample, while
#     fewer than 16 are in flight (N = 240 makes at most 14): so completed >= C - 15, where the catch-up event alone
#     (after #N) would have left it at #1;
#   - coll_unreached is an op the GPU has not reached (> C+1), at most 17 ops past the stuck one if issued that far
#     (the spacing of "reached" events and marks), or 0 when nothing pending proves one; coll_uncompleted is > C,
#     and at most coll_unreached; both 0 once everything completed; gpu_source is cuda-events, progress_exact false.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=60 NCCLWATCH_DUMP_AT_EXIT=1
N=240
touch "$GO"
launch_job 1 --fake-cuda --steps $N --count 1024 --cuda-hold-step 0 --wait-gone "$GO"

# check C R: exit 0 once everything the rank file says is within the bounds for a GPU that completed #1..#C and
# reached #R (C + 1 while it sits in an op, C while it is still in the compute before #1); 1 while a lower bound is
# not reached yet (the poller runs every few ms); 2 (and a message) when something claims more than the GPU did.
check() {
    dump_rank 0 || return 1
    "$PY" - "$WORK/rank0.json" "$N" "$@" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
n, c, at = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
comm = d['comms'][0]
got = {k: comm[k] for k in ('coll_issued', 'coll_reached', 'coll_completed', 'ops_completed', 'coll_unreached',
                            'coll_uncompleted', 'gpu_source', 'progress_exact')}
def false(why):
    print(f"false at C={c}: {why}: {got}")
    sys.exit(2)
if comm['gpu_source'] != 'cuda-events' or comm['progress_exact']:
    false('not labelled as sampled CUDA events')
if comm['coll_issued'] != n:
    sys.exit(1)
reached, completed, done = comm['coll_reached'], comm['coll_completed'], comm['ops_completed']
unreached, uncompleted = comm['coll_unreached'], comm['coll_uncompleted']
if completed > c or done > c or reached > at or reached < completed:
    false('claims more than the GPU did')
if unreached and not at < unreached <= n:
    false('coll_unreached names an op the GPU reached')
if uncompleted and not c < uncompleted <= n:
    false('coll_uncompleted names an op the GPU completed')
if unreached and uncompleted > unreached:
    false('coll_uncompleted above coll_unreached')
for r in d['records']['items']:
    if r['op'] != 'AllReduce':
        continue
    if r['done_ms'] is not None and r['seq'] > c:
        false(f"record #{r['seq']} has a completion time")
    if r['reached_ms'] is not None and r['seq'] > at:
        false(f"record #{r['seq']} has a reached time")
lower = c - 15 if c < n else n  # the marks' bound; all of it once the GPU finished
if completed < max(lower, 0) or done < max(lower, 0):
    sys.exit(1)
if at + 17 <= n and not (at < unreached <= at + 17 and c < uncompleted <= unreached):
    sys.exit(1)  # a mark or "reached" event lies within 17 ops past the GPU's: it must be pending
if c >= n and (unreached or uncompleted):
    sys.exit(1)  # nothing pending proves anything any more
print(f"C={c}: {got}")
EOF
}

# expect C R: waits until check C R passes; fails at once on a false claim.
expect() {
    local deadline=$(($(date +%s%N) + 30 * 1000000000)) out rc
    while :; do
        out=$(check "$1" "$2")
        rc=$?
        [ "$rc" = 0 ] && echo "$out" && return 0
        [ "$rc" = 2 ] && fail "$out"
        [ "$(date +%s%N)" -lt "$deadline" ] ||
            fail "C=$1: the bounds were not reached in 30 s: $(json_get "$WORK/rank0.json" "d['comms'][0]")"
        sleep 0.05
    done
}

# Held: nothing done, not even the compute before #1, whose "reached" event proves #1 not reached.
expect 0 0
[ "$(json_get "$WORK/rank0.json" "d['comms'][0]['coll_unreached']")" = 1 ] || fail "#1 is not proven unreached"
for c in 200 $((N - 3)); do
    echo $((c + 1)) >"$FAKE_CUDA_HOLD_FILE"  # the compute and #1..#c: the GPU sits in #c+1
    expect $c $((c + 1))
done
eval "$(record_counts "$WORK/rank0.json" "r['op'] == 'AllReduce'")"
[ "$FOLLOWED" -ge $((N * 9 / 10)) ] || fail "only $FOLLOWED of $KEPT ops followed: the burst was not a run-ahead"
rm -f "$FAKE_CUDA_HOLD_FILE"
expect $N $N
finish_job
[ "$JOB_RC" = 0 ] || fail "the job failed (rc $JOB_RC)"
echo "marks: $(json_get "$(ls "$(job_dir)"/rank0-*.dump.json 2>/dev/null | head -1)" "d['mark_events']" 2>/dev/null)," \
    "events $(fake_stat 0 event_records) for $N ops"
echo "ok: under run-ahead, completed followed the GPU within 15 ops; nothing claimed more than it did"

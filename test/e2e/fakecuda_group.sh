#!/bin/bash
# GPU sampling in NCCL groups: each step is one group over two communicators on two streams (the world: 8
# all_reduces and a ring send/recv; a split communicator: 8 all_reduces), launched at the outermost ncclGroupEnd.
# One event covers at most 8 ops of a stream, so the world stream's 10 ops are two chunks: in the first group the
# first chunk is sampled and the second follows it (same stream, same instant), while the other stream's chunk is
# sampled on its own. Every op completes. With NCCLWATCH_GPU_SAMPLE=all, every chunk is sampled.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=30

# check_first_group RANK auto|all: the first group's chunks sampled or not as described above.
check_first_group() {
    "$PY" - "$WORK/rank$1.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
mode = sys.argv[2]
def sampled_out(r):
    return 'sampled' in r['flags'] or any(t.startswith('0x') and int(t, 16) & 0x40 for t in r['flags'].split(','))
ops = [r for r in d['records']['items'] if r['op'] in ('AllReduce', 'Send', 'Recv')]
first = min(r['group_id'] for r in ops)
group = sorted((r for r in ops if r['group_id'] == first), key=lambda r: r['ticket'])
streams = {}
for r in group:
    streams.setdefault(r['stream'], []).append(r)
world, sub = streams.get('0x5a0000', []), streams.get('0x5a1000', [])
got = ([sampled_out(r) for r in world], [sampled_out(r) for r in sub])
want = ([False] * 8 + [mode == 'auto'] * 2, [False] * 8)
if got != want or [r['op'] for r in world] != ['AllReduce'] * 8 + ['Send', 'Recv']:
    sys.exit(f"first group {first}: sampled out per op {got}, want {want}: {[(r['op'], r['stream'], r['flags']) for r in group]}")
if any('group' not in r['flags'] or r['done_ms'] is None or 'untracked' in r['flags'] for r in ops):
    sys.exit('an op is not marked in-group, not completed, or untracked')
PY
}

for mode in auto all; do
    rm -rf "$NCCLWATCH_DIR"
    touch "$GO"
    NCCLWATCH_GPU_SAMPLE=$mode launch_job 2 --fake-cuda --steps 5 --split --group --coll-per-step 8 --wait-gone "$GO"
    wait_for 60 rank_settled 0 90 || fail "$mode: rank 0 did not complete every op"
    wait_for 60 rank_settled 1 90 || fail "$mode: rank 1 did not complete every op"
    finish_job
    [ "$JOB_RC" = 0 ] || fail "$mode: job failed (rc $JOB_RC)"
    for r in 0 1; do
        dump_rank $r || fail "cannot read rank $r's file"
        [ "$(json_get "$WORK/rank$r.json" "sorted(c['ops_issued'] for c in d['comms'])")" = "[40, 50]" ] ||
            fail "$mode: rank $r issued $(json_get "$WORK/rank$r.json" "[c['ops_issued'] for c in d['comms']]")"
        msg=$(check_first_group $r $mode 2>&1) || fail "$mode: rank $r: $msg"
    done
    echo "$mode: events recorded $(fake_stat 0 event_records) (rank 0), $(fake_stat 1 event_records) (rank 1) for 90 ops each"
done
echo "ok: grouped ops on two streams completed; a stream's second chunk followed its first"

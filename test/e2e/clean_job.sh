#!/bin/bash
# A clean job with a split communicator, groups with send/recv and broadcasts: it runs as without the shim,
# every rank has a file with every operation, and nothing is reported.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=5
run_job 4 --steps 12 --split --group --bcast-every 3 --bcast-legacy
[ "$JOB_RC" = 0 ] || fail "job failed under the shim (rc $JOB_RC)"
for r in 0 1 2 3; do grep -q "exit rank=$r status=0" "$WORK/launch.out" || fail "rank $r did not exit 0"; done
[ "$(count_files '*.ncw')" = 4 ] || fail "want 4 rank files"
[ "$(count_files '*.report.json')" = 0 ] || fail "a clean job produced a report"
grep -q "STALL\|MISMATCH" "$WORK/launch.err" && fail "a clean job reported a problem"
# Quiet by default: a healthy job hears nothing from ncclwatch (debug level says where each rank records).
grep -q "ncclwatch" "$WORK/launch.err" && fail "a clean job printed: $(grep -m3 ncclwatch "$WORK/launch.err")"

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" || fail "collector analyze found a problem in a clean job"
f=$(ls "$(job_dir)"/rank0-*.ncw)
"$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "collector dump failed"
# 12 all_reduces and 12 on the split comm, 4 broadcasts (ncclBcast recorded once each: the nested
# ncclBroadcast inside NCCL is not recorded twice), 12 sends and 12 recvs.
n_ar=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op']=='AllReduce'])")
n_bc=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op']=='Broadcast'])")
n_p2p=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op'] in ('Send','Recv')])")
n_done=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op'] in ('AllReduce','Broadcast','Send','Recv') and r['done_ms'] is not None])")
[ "$n_ar" = 24 ] || fail "AllReduce records: $n_ar, want 24"
[ "$n_bc" = 4 ] || fail "Broadcast records: $n_bc, want 4"
[ "$n_p2p" = 24 ] || fail "Send/Recv records: $n_p2p, want 24"
[ "$n_done" = 52 ] || fail "completed records: $n_done, want 52"
grouped=$(json_get "$WORK/dump.json" "len(set(r['group_id'] for r in d['records']['items'] if r['group_id']))")
[ "$grouped" = 12 ] || fail "group launches: $grouped, want 12"

# A nonblocking communicator (ncclCommInitRankConfig with blocking = 0, polled with ncclCommGetAsyncError like
# PyTorch does), with groups.
rm -rf "$NCCLWATCH_DIR"
run_job 2 --steps 6 --nonblocking --group
[ "$JOB_RC" = 0 ] || fail "nonblocking job failed under the shim (rc $JOB_RC)"
[ "$(count_files '*.report.json')" = 0 ] || fail "a clean nonblocking job produced a report"
f=$(ls "$(job_dir)"/rank1-*.ncw)
"$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "collector dump failed"
n=$(json_get "$WORK/dump.json" "len([r for r in d['records']['items'] if r['op'] in ('AllReduce','Send','Recv') and r['done_ms'] is not None and 'nonblocking' in r['flags']])")
[ "$n" = 18 ] || fail "nonblocking records completed: $n, want 18"
echo "ok: clean job, 52 operations recorded and completed, no report; nonblocking job likewise"

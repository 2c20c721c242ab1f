# shellcheck shell=bash
# Shared by the end-to-end tests of GPU completion tracking, which run the fake ranks with the fake libcuda.so.1
# (fake_rank --fake-cuda; test/fake_cuda/fake_cuda.h says what the fake does). Sources lib.sh.
. "$(dirname "$0")/lib.sh"
# These tests are about the CUDA-event path, the fallback for what NCCL's profiler events do not cover (NCCL before
# 2.26, another plugin): the test NCCL's profiler events would take its collectives over (profiler_events.sh).
export NCCLWATCH_PROFILER=off
# While this file exists, no stream's work completes (fake_rank --cuda-hold-step creates it; the test removes it).
export FAKE_CUDA_HOLD_FILE="$WORK/gpu-hold"
# fake_rank --wait-gone "$GO": the job ends (teardown, counters printed) once the test removes it.
GO="$WORK/go"

rank_file() { ls "$(job_dir)"/rank"$1"-*.ncw 2>/dev/null | head -1; }

# The live state of rank R's file, as the collector reads it, into $WORK/rankR.json.
dump_rank() {
    local f
    f=$(rank_file "$1")
    [ -n "$f" ] && "$NCW_COLLECTOR" dump --json "$f" >"$WORK/rank$1.json"
}

# (ops issued, ops completed) for each communicator in rank R's last dump_rank, as a Python list.
comm_counts() { json_get "$WORK/rank$1.json" "[(c['ops_issued'], c['ops_completed']) for c in d['comms']]"; }

# Rank R issued at least N operations in all, and each of its communicators has completed every one it issued.
rank_settled() {
    dump_rank "$1" && "$PY" - "$WORK/rank$1.json" "$2" <<'EOF'
import json, sys
comms = json.load(open(sys.argv[1]))['comms']
issued = sum(c['ops_issued'] for c in comms)
sys.exit(0 if comms and issued >= int(sys.argv[2]) and all(c['ops_completed'] == c['ops_issued'] for c in comms) else 1)
EOF
}

# Ends a job started with --wait-gone "$GO" and waits for it; sets JOB_RC (0 when every rank exited 0).
finish_job() {
    rm -f "$GO"
    wait "$LAUNCH_PID"
    LAUNCH_PID=""
    wait_for 30 grep -q "^exit rank=" "$WORK/launch.out" || fail "the job did not end"
    JOB_RC=0
    grep "^exit rank=" "$WORK/launch.out" | grep -qv "status=0$" && JOB_RC=1
}

# A counter the fake libcuda reported at the end of rank R: fake_stat R NAME (fake_rank --fake-cuda prints them).
fake_stat() { sed -n "s/^fake-cuda rank $1: .*\b$2=\([0-9][0-9]*\).*/\1/p" "$WORK/launch.out"; }

# Counts of the records of a `collector dump --json` file that match a Python condition on `r`, as shell
# assignments (for eval): KEPT (matching), FOLLOWED (sampled out), UNTRACKED, CAPTURED, NOT_DONE (no completion time).
record_counts() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
def sampled_out(r):  # disk::kFlagSampledOut (0x40), by name or in hex
    return 'sampled' in r['flags'] or any(t.startswith('0x') and int(t, 16) & 0x40 for t in r['flags'].split(','))
rs = [r for r in json.load(open(sys.argv[1]))['records']['items'] if eval(sys.argv[2])]
print(f"KEPT={len(rs)} FOLLOWED={sum(map(sampled_out, rs))} "
      f"UNTRACKED={sum('untracked' in r['flags'] for r in rs)} CAPTURED={sum('captured' in r['flags'] for r in rs)} "
      f"NOT_DONE={sum(r['done_ms'] is None for r in rs)}")
EOF
}

# Succeeds when the Python expression over the JSON file `d` is true (for wait_for).
json_get_true() { [ "$(json_get "$1" "$2" 2>/dev/null)" = True ]; }

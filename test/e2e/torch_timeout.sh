#!/bin/bash
# torch's process-group timeout, read where the user gives it (issue 43): the launcher's hook
# (python/ncclwatch/_boot/ncclwatch_torch_timeout.py) wraps init_process_group and new_group as
# torch.distributed.distributed_c10d is imported, here a stand-in with torch's signatures (test/e2e/fake_torch).
#  - The wrappers are the functions the program calls (torch.distributed's re-exports too), keep their signatures,
#    return what the real ones return and let what they raise through.
#  - A job (py_stall.py over the test NCCL) whose rank 0 is away while the others' all_reduce outlives
#    init_process_group(timeout=3 s), torch's watchdog thread then aborting them: the shortest NCCL group timeout
#    (3 s; not the gloo group's) is in every rank file, analyze's FAILED says it, and the audit sets it beside
#    NCCLWATCH_TIMEOUT_SEC, warning where ncclwatch's is not the shorter.
. "$(dirname "$0")/lib.sh"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
BOOT="$NCW_SOURCE_ROOT/python/ncclwatch/_boot"
export PYTHONPATH="$BOOT:$NCW_SOURCE_ROOT/test/e2e/fake_torch"

# The wrappers, alone (no NCCL in the process).
LD_PRELOAD="$NCW_SHIM" /usr/bin/python3 - <<'EOF' || fail "the wrappers changed what the program sees"
import datetime, inspect, sys
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
assert dist.init_process_group is c10d.init_process_group, "torch.distributed's re-export is not the wrapper"
assert getattr(c10d.new_group, "_ncclwatch_wrapped", False), "new_group is not wrapped"
assert inspect.signature(c10d.new_group) == inspect.signature(c10d.new_group.__wrapped__), "the signature changed"
assert dist.new_group([0, 1], datetime.timedelta(seconds=5)) == "group1", "the result changed"
try:
    dist.init_process_group("mpi")
    sys.exit("an exception of the real function was swallowed")
except ValueError as e:
    assert "Invalid backend" in str(e)
print("wrappers ok")
EOF
# Without the shim preloaded, nothing is wrapped.
/usr/bin/python3 -c 'import torch.distributed.distributed_c10d as c; import sys; sys.exit(1 if getattr(c.new_group, "_ncclwatch_wrapped", False) else 0)' ||
    fail "wrapped without the shim"

export FAKE_NCCL_LIB="$(dirname "$FAKE_RANK")/libnccl.so.2" FAKE_NCCL_TIMEOUT_SEC=60
export TORCH_TIMEOUT_SEC=3 STALL_RANK=0 STALL_STEP=3 STEPS=20 STOP_FILE="$WORK/never"

# torch_job NCCLWATCH_TIMEOUT_SEC: the job, ended by torch's watchdog (the launcher then ends rank 0), and analyze.
torch_job() {
    new_launch_logs
    rm -rf "$NCCLWATCH_DIR"
    NCCLWATCH_TIMEOUT_SEC=$1 LD_PRELOAD="$NCW_SHIM" "$FAKE_LAUNCH" --nproc 4 --kill-on-first-failure --timeout-sec 60 \
        -- /usr/bin/python3 "$NCW_SOURCE_ROOT/test/e2e/py_stall.py" >"$WORK/launch.out" 2>"$WORK/launch.err"
    [ $? != 0 ] || fail "the job torch's watchdog ended exited 0"
    grep -q "Watchdog caught collective operation timeout" "$WORK/launch.err" || fail "torch's watchdog did not act"
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
    [ $? = 1 ] || fail "analyze exited $? after a failed job"
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
}

torch_job 2
for f in "$(job_dir)"/rank*.ncw; do
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump.json" || fail "dump of $f failed"
    [ "$(json_get "$WORK/dump.json" "d['header']['torch_timeout_ms']")" = 3000 ] ||
        fail "$f: torch_timeout_ms $(json_get "$WORK/dump.json" "d['header'].get('torch_timeout_ms')"), want 3000"
done
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  torch's NCCL watchdog ended rank.* had waited [0-9.]* s for rank 0 (.*): the process group's timeout (3 s) was shorter than that wait" ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"
[ "$(json_get "$WORK/analysis.json" "d['verdicts'][0]['kind']")" = FAILED ] || fail "the lead is not FAILED"
grep -q "torch's process-group timeout 3 s, NCCLWATCH_TIMEOUT_SEC 2 s: ncclwatch names a stall's culprit before torch's NCCL watchdog ends the job" \
    "$WORK/analysis.txt" || fail "the audit does not set the two timeouts side by side: $(grep -m2 -i timeout "$WORK/analysis.txt")"

torch_job 5
grep -q "torch's process-group timeout 3 s, NCCLWATCH_TIMEOUT_SEC 5 s: ncclwatch's timeout is not the shorter" \
    "$WORK/analysis.txt" || fail "no warning where ncclwatch's timeout is the longer: $(grep -m2 -i timeout "$WORK/analysis.txt")"
echo "ok: torch's timeout read from init_process_group / new_group (3 s, gloo's left out), in every rank file, in FAILED and beside NCCLWATCH_TIMEOUT_SEC"

#!/bin/bash
# NCCLWATCH_ACTION: abort makes the framework's blocked call return an error (the real ncclCommAbort releases it),
# so the job ends long before the test NCCL's own timeout; kill ends the stalled ranks with SIGABRT after the dump.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_TIMEOUT_SEC=60
start=$(date +%s)
NCCLWATCH_ACTION=abort run_job 3 --steps 6 --skip-rank 1 --skip-step 2 --hold-ms 5000 --teardown none
took=$(($(date +%s) - start))
grep -q "NCCLWATCH_ACTION=abort: revoking communicator" "$WORK/launch.err" || fail "no abort (revoke) message"
grep -q "exit rank=0 status=3" "$WORK/launch.out" || fail "rank 0's blocked all_reduce did not fail after the abort"
grep -q "exit rank=2 status=3" "$WORK/launch.out" || fail "rank 2's blocked all_reduce did not fail after the abort"
[ "$took" -lt 30 ] || fail "the job took $took s: the abort did not release the waiting ranks"
# Whichever waiting rank reported first aborted the communicator for both.
has_files '*.report.json' 1 || fail "no report before the abort"
grep -q RECOVERED "$WORK/launch.err" && fail "an abort was reported as a recovery"

rm -rf "$NCCLWATCH_DIR"
NCCLWATCH_ACTION=kill run_job 3 --steps 6 --skip-rank 1 --skip-step 2 --hold-ms 5000
grep -q "exit rank=0 status=SIGABRT" "$WORK/launch.out" || fail "rank 0 was not killed with SIGABRT"
has_files 'rank0-*.dump.json' 1 || fail "no dump before the kill"
echo "ok: abort released the waiting ranks in $took s; kill sent SIGABRT after the dump"

#!/bin/bash
# Bad NCCLWATCH_* values and an unusable dump folder are reported clearly, and the job runs on.
. "$(dirname "$0")/lib.sh"
NCCLWATCH_TIMEOUT_SEC=soon NCCLWATCH_ACTION=explode run_job 2 --steps 5
[ "$JOB_RC" = 0 ] || fail "job failed with bad config values"
grep -q "NCCLWATCH_TIMEOUT_SEC='soon' is not valid (accepted: 0.1..86400); using the default 60" "$WORK/launch.err" ||
    fail "no clear message for NCCLWATCH_TIMEOUT_SEC"
grep -q "NCCLWATCH_ACTION='explode' is not valid (accepted: report|abort|kill)" "$WORK/launch.err" ||
    fail "no clear message for NCCLWATCH_ACTION"

# A huge bad value with raw newlines is echoed cut and escaped, on one line.
huge=$("$PY" -c "print('x' * 50000 + '\\n' + 'forged: NOT_JOINED' + 'y' * 50000, end='')")
NCCLWATCH_POLL_MS="$huge" run_job 2 --steps 5
[ "$JOB_RC" = 0 ] || fail "job failed with a huge bad value"
grep -q "NCCLWATCH_POLL_MS='x\{200\}\.\.\. (100019 bytes)' is not valid" "$WORK/launch.err" ||
    fail "the huge value is not cut to 200 characters"
! grep -q "^forged: NOT_JOINED" "$WORK/launch.err" || fail "the value's newline reached the log"
[ "$(awk 'length > 1000' "$WORK/launch.err" | wc -l)" = 0 ] || fail "a log line over 1,000 characters"

NCCLWATCH_DIR=/proc/self/nowhere run_job 2 --steps 5
[ "$JOB_RC" = 0 ] || fail "job failed with an unusable NCCLWATCH_DIR"
grep -q "cannot keep a rank file (/proc/self/nowhere" "$WORK/launch.err" || fail "no clear message for the folder"

# Corrupt and truncated dump files: the collector names them and analyses the rest.
export NCCLWATCH_TIMEOUT_SEC=60
run_job 2 --steps 5
d=$(job_dir)
f=$(ls "$d"/rank0-*.ncw)
head -c 3000 "$f" >"$d/truncated.ncw"
head -c 100000 /dev/urandom >"$d/garbage.ncw"
"$NCW_COLLECTOR" analyze "$d" >"$WORK/analysis.txt" 2>&1
rc=$?
[ $rc = 0 ] || fail "collector analyze exit $rc over damaged files, want 0 (no hang among the readable ones)"
grep -q "truncated.ncw" "$WORK/analysis.txt" || fail "the truncated file is not named"
grep -q "garbage.ncw" "$WORK/analysis.txt" || fail "the corrupt file is not named"
echo "ok: bad values, folder and files reported; work went on"

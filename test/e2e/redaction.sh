#!/bin/bash
# Secrets never leave the process: with the common secret names set (NCCL_IB_PASSWD, TORCH_DISTRIBUTED_AUTH, a
# token, a URL with a password), a stalled job writes its rank files, reports and dumps, the live collector inside
# rank 0 writes its report, and `analyze` prints its own: none of them holds a secret's value. They are redacted at
# capture, so the live frames (read from the rank file) cannot carry them either.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
export NCCL_IB_PASSWD=hunter2passwd TORCH_DISTRIBUTED_AUTH=opensesame-auth NCCL_NET_TOKEN=tok-3141
export TORCH_DISTRIBUTED_STORE_URL=tcp://bob:pw-in-url-27@store:29500
launch_job 4 --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 30 has_files '*.ncw' 4 || fail "no rank files"
wait_for 30 test -s "$(job_dir)/live-report.json" || fail "no live report"
wait_for 20 has_files '*.dump.json' 4 || fail "not every rank wrote a dump"
wait_for 20 has_files '*.report.json' 3 || fail "no stall reports"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" 2>&1
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json" 2>&1
for f in "$(job_dir)"/rank0-*.ncw; do "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump0.json"; done
for secret in hunter2passwd opensesame-auth tok-3141 pw-in-url-27; do
    hits=$(grep -rl -a -- "$secret" "$(job_dir)" "$WORK/analysis.txt" "$WORK/analysis.json" "$WORK/dump0.json")
    [ -z "$hits" ] || fail "the value of a secret ($secret) was written to: $hits"
done
grep -q '"NCCL_IB_PASSWD": "<redacted>"' "$(ls "$(job_dir)"/*.dump.json | head -1)" ||
    fail "the dump does not show NCCL_IB_PASSWD as redacted"
grep -q 'tcp://bob:<redacted>@store:29500' "$(ls "$(job_dir)"/*.dump.json | head -1)" ||
    fail "the URL's password is not redacted in the dump"
echo "ok: no secret's value in the rank files, reports, dumps, the live report or analyze"

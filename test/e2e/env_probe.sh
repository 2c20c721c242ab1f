#!/bin/bash
# Format 1.1's environment region: each rank's file records its NCCL_*/TORCH_NCCL_* variables (secrets redacted)
# and, once the shim has scanned the loaded (fake) libnccl.so.2, which set NCCL_* variables nothing reads.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=60
export NCCL_DEBUG=WARN NCCL_SOCKET_TIMEOUT=30 NCCL_MIN_NRINGS=2 NCCL_TEST_SECRET=hunter2
# --hold-ms keeps the ranks alive while the probe runs: the test waits on its facts, not on a fixed time.
launch_job 2 --steps 4 --hold-ms 20000

entries() { tr '\0' '\n' <"$1"; }
probed() {
    local f n=0
    for f in "$(job_dir)"/*.ncw; do
        [ -f "$f" ] && entries "$f" | grep -qx 'ncclwatch.probe=done' && n=$((n + 1))
    done
    [ "$n" = 2 ]
}
wait_for 30 probed || fail "the probe's facts did not appear in both rank files"

for f in "$(job_dir)"/*.ncw; do
    e=$(entries "$f")
    for want in 'NCCL_DEBUG=WARN' 'NCCL_SOCKET_TIMEOUT=30' 'NCCL_TEST_SECRET=<redacted>' 'ncclwatch.nccl_reads=[0-9]*' \
        'ncclwatch.nccl_library=.*/libnccl.so.2' 'ncclwatch.no_effect=NCCL_SOCKET_TIMEOUT,NCCL_TEST_SECRET'; do
        grep -qx "$want" <<<"$e" || fail "$(basename "$f"): no entry '$want' in: $(grep -a 'NCCL\|ncclwatch' <<<"$e" | tr '\n' ' ')"
    done
    grep -q hunter2 <<<"$e" && fail "$(basename "$f"): a secret's value was recorded"
    # NCCL_MIN_NRINGS is a legacy spelling the (fake) library still embeds: read, so not in no_effect.
    grep -q 'ncclwatch.no_effect=.*NCCL_MIN_NRINGS' <<<"$e" && fail "NCCL_MIN_NRINGS listed as having no effect"
done

kill -TERM -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
"$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank0-*.ncw)" >"$WORK/dump.json" || fail "collector dump of a 1.1 file failed"
echo "ok: environment region written, secrets redacted, NCCL_SOCKET_TIMEOUT found unread by a scan of the library"

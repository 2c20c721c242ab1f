#!/bin/bash
# NCCLWATCH_COLLECTOR=auto: global rank 0 runs the live collector on MASTER_ADDR:MASTER_PORT+1 inside its shim and
# every rank streams digests to it. Rank 2 of 4 skips an all_reduce: the in-shim collector writes the live report
# naming rank 2 into the job folder and asks every rank for a dump.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
# The siblings' watchdogs would name rank 2 too; the live collector's report is the one under test.
launch_job 4 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000

wait_for 30 grep -q "live collector listening on 127.0.0.1:" "$WORK/launch.err" || fail "rank 0 started no collector"
wait_for 20 grep -q "sending live digests to the collector at 127.0.0.1:" "$WORK/launch.err" || fail "no rank connected"
wait_for 30 test -s "$(job_dir)/live-report.txt" || fail "no live report in the job folder"
grep -q "rank 2" "$(job_dir)/live-report.txt" || fail "the live report does not name rank 2: $(cat "$(job_dir)/live-report.txt")"
# Every rank (the three waiting ones and rank 2) writes its dump when the collector asks.
wait_for 20 has_files '*.dump.json' 4 || fail "not every rank wrote a dump: $(ls "$(job_dir)")"
grep -q "live collector asks for a dump" "$WORK/launch.err" || fail "no rank logged the collector's dump request"
echo "ok: the in-shim collector of rank 0 named rank 2 and collected every rank's dump"

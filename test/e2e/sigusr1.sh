#!/bin/bash
# SIGUSR1 asks a rank for a dump; the dump holds the environment (secrets redacted), the comm table and the records.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=60 NCCL_DEBUG=WARN NCCL_IB_TOKEN=hunter2
launch_job 2 --steps 5 --hold-ms 60000
wait_for 30 has_files '*.ncw' 2 || fail "no rank files"
f=$(ls "$(job_dir)"/rank0-*.ncw)
pid=${f##*-}
pid=${pid%.ncw}
all_done() {
    "$NCW_COLLECTOR" dump --json "$f" >"$WORK/live.json" &&
        [ "$(json_get "$WORK/live.json" "d['comms'][0]['coll_completed']")" = 5 ]
}
wait_for 30 all_done || fail "rank 0 did not finish its steps"
kill -USR1 "$pid"
wait_for 10 has_files 'rank0-*.dump.json' 1 || fail "no dump after SIGUSR1"
d=$(ls "$(job_dir)"/rank0-*.dump.json)
[ "$(json_get "$d" "d['environment']['NCCL_DEBUG']")" = WARN ] || fail "environment missing from the dump"
[ "$(json_get "$d" "d['environment']['NCCL_IB_TOKEN']")" = "<redacted>" ] || fail "a secret was not redacted"
[ "$(json_get "$d" "len([r for r in d['records'] if r['op']=='AllReduce'])")" = 5 ] || fail "records missing"
kill -0 "$pid" || fail "SIGUSR1 killed the rank"
echo "ok: SIGUSR1 dump"

#!/bin/bash
# Quiet by default: an 8-rank stall on one host (rank 2 skips an all_reduce and stays alive outside NCCL; the seven
# others wait in it) says at most 12 lines on the job's stderr in all, with and without the live collector inside
# rank 0's shim (NCCLWATCH_COLLECTOR=auto), and the first of them is the verdict: the culprit and the op. One report
# for the node, by local rank 0; the other ranks, sharing its stderr, say nothing; the dumps are said once.
# Each run is held until every rank wrote its dump and the collector's verdict came (auto), then 3 s more.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=3 FAKE_NCCL_TIMEOUT_SEC=120 NCCLWATCH_DIGEST_MS=50
MAX_LINES=12

# stall_run NAME: the stall, its stderr kept in $WORK/NAME.err; checks the lines.
stall_run() {
    local name=$1 n first
    rm -rf "$NCCLWATCH_DIR"
    launch_job 8 --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000
    wait_for 40 has_files '*.report.json' 7 || fail "$name: not every waiting rank reported the stall"
    wait_for 20 has_files '*.dump.json' 8 || fail "$name: not every rank wrote its dump"
    wait_for 10 grep -q "dumps written" "$WORK/launch.err" || fail "$name: the node's dumps are not said"
    if [ "$name" = auto ]; then
        wait_for 20 test -s "$(job_dir)/live-report.json" || fail "auto: the live collector wrote no report"
        grep -q "NOT_JOINED: rank 2 " "$(job_dir)/live-report.txt" || fail "auto: the live report does not name rank 2"
        got_verdict() { json_get "$(job_dir)"/rank0-*.report.json "[e['type'] for e in d['events']]" | grep -q collector_verdict; }
        wait_for 20 got_verdict || fail "auto: the collector's verdict did not reach rank 0's shim"
    fi
    sleep 3
    stop_job
    cp "$WORK/launch.err" "$WORK/$name.err"
    n=$(ncw_lines "$WORK/$name.err" | wc -l)
    echo "--- $name: $n lines from ncclwatch on stderr"
    ncw_lines "$WORK/$name.err"
    [ "$n" -le "$MAX_LINES" ] || fail "$name: $n lines from ncclwatch on stderr, want at most $MAX_LINES"
    first=$(ncw_lines "$WORK/$name.err" | head -1)
    echo "$first" | grep -q "^\[ncclwatch r0\] NOT_JOINED: rank 2 (.*) never issued AllReduce #10 on communicator 0x[0-9a-f]* (world, 8 ranks)" ||
        fail "$name: the first line does not name the culprit and the op: $first"
    [ "$(ncw_lines "$WORK/$name.err" | grep -vc '^\[ncclwatch r0\] ')" = 0 ] ||
        fail "$name: ranks other than the node's reporter said: $(ncw_lines "$WORK/$name.err" | grep -v '^\[ncclwatch r0\] ')"
    [ "$(grep -c "rank 2 is behind: completed #9, never issued #10" "$WORK/$name.err")" = 1 ] ||
        fail "$name: the evidence is not said once"
    [ "$(grep -c "dumps* written" "$WORK/$name.err")" = 1 ] || fail "$name: the dumps are said more than once"
    grep -q "^\[ncclwatch r0\] dumps written (stall): all 8 ranks of this host, " "$WORK/$name.err" ||
        fail "$name: the node's dump line: $(grep "dumps* written" "$WORK/$name.err")"
    # What did not fit is in the report file: every rank's row.
    grep -q "more lines* in .*/rank0-.*\.report\.json" "$WORK/$name.err" || fail "$name: no line says where the rest is"
    for r in 0 1 3 4 5 6 7; do
        json_get "$(job_dir)"/rank0-*.report.json "[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]['evidence']" |
            grep -q "rank $r (global $r, host [^,]*, pid [0-9]*): issued #10" || fail "$name: rank $r's row is not in the report file"
    done
}

stall_run local
export NCCLWATCH_COLLECTOR=auto
stall_run auto
echo "ok: the 8-rank stall says $(ncw_lines "$WORK/local.err" | wc -l) lines, $(ncw_lines "$WORK/auto.err" | wc -l) with the live collector (at most $MAX_LINES), the verdict first"

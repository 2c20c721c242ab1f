#!/bin/bash
# How a rank ends, and the causal order after it (issue 14): 4 ranks, rank 3 ends before its all_reduce #5 while the
# others wait in it. Each case checks the culprit and kind twice: live (rank 0's own report, or its final verdict at
# the launcher's SIGTERM), and with analyze once every process has ended.
#   _exit(0) (Python's os._exit), exit(3), a SIGSEGV; exit(3) with the launcher's SIGTERM to the survivors 0.3 s
#   later (torchrun); a program with its own SIGSEGV and SIGTERM handlers, which still get them.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2
export FAKE_NCCL_TIMEOUT_SEC=5

# the lead verdict of analyze --json over the job folder: "KIND CULPRITS"
offline_lead() {
    wait_for 10 ranks_gone || fail "the ranks' processes did not end"
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/a.json" 2>"$WORK/a.err"
    json_get "$WORK/a.json" "d['verdicts'][0]['kind'] + ' ' + str([c['comm_rank'] for c in d['verdicts'][0]['culprits']])"
}
offline_summary() { json_get "$WORK/a.json" "d['verdicts'][0]['summary']"; }
launcher_done() { ! kill -0 "$LAUNCH_PID" 2>/dev/null; }
# waits (10 s at most) until FILE has an event of TYPE whose lead verdict is WANT; LEAD is what it last read
lead_is() {
    LEAD=$(live_lead "$1" "$2" 2>/dev/null)
    [ "$LEAD" = "$3" ]
}
live_lead() {  # FILE EVENT_TYPE
    json_get "$1" "[e for e in d['events'] if e['type']=='$2'][0]['verdicts'][0]['kind'] + ' ' + str([e for e in d['events'] if e['type']=='$2'][0]['verdicts'][0]['culprits'])"
}
has_event() { [ "$(json_get "$1" "len([e for e in d['events'] if e['type']=='$2'])" 2>/dev/null)" -gt 0 ] 2>/dev/null; }
end_of() {  # RANK -> "end_kind end_status"
    "$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank$1-*.ncw)" >"$WORK/d$1.json" || return 1
    json_get "$WORK/d$1.json" "d['header']['end_kind'] + ' ' + str(d['header']['end_status'])"
}

# case NAME WANT_END WANT_WORDS fake_rank args...: rank 3 ends, the others hang until the test NCCL's timeout
case_ends() {
    local name=$1 want_end=$2 words=$3
    shift 3
    rm -rf "$NCCLWATCH_DIR"
    launch_job 4 --steps 10 --exit-rank 3 --exit-step 4 "$@"
    wait_for 30 has_files 'rank0-*.report.json' 1 || fail "$name: no live report from rank 0"
    r=$(ls "$(job_dir)"/rank0-*.report.json)
    wait_for 10 lead_is "$r" stall "DEAD [3]" || fail "$name: live verdict '$LEAD', want DEAD [3]"
    wait_for 60 launcher_done || fail "$name: the job did not end"
    wait "$LAUNCH_PID" 2>/dev/null
    LAUNCH_PID=""
    [ "$(end_of 3)" = "$want_end" ] || fail "$name: rank 3's file says it ended '$(end_of 3)', want '$want_end'"
    lead=$(offline_lead)
    [ "$lead" = "DEAD [3]" ] || fail "$name: analyze's lead verdict '$lead' once the job ended, want DEAD [3]: $(cat "$WORK/a.json" | head -c 3000)"
    offline_summary | grep -q "$words" || fail "$name: analyze does not say '$words': $(offline_summary)"
    echo "ok: $name: DEAD rank 3 ($words), live and offline"
}

case_ends "_exit(0)" "exit 0" "exited (exit code 0)" --exit-how _exit --exit-code 0
case_ends "exit(3)" "exit 3" "exited (exit code 3)" --exit-how exit --exit-code 3
case_ends "SIGSEGV" "fatal signal 11" "crashed with SIGSEGV" --exit-how segv

# The launcher's teardown: SIGTERM to the survivors 0.3 s after rank 3's exit(3), before any timeout. Each survivor
# records it, gives its final verdict from the siblings' files, then dies of the signal.
rm -rf "$NCCLWATCH_DIR"
new_launch_logs
LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 --kill-on-first-failure --term-delay-ms 300 \
    -- "$FAKE_RANK" --steps 10 --exit-rank 3 --exit-step 4 --exit-code 3 >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!
wait_for 30 launcher_done || fail "teardown: the job did not end"
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
grep -q "exit rank=0 status=SIGTERM" "$WORK/launch.out" || fail "teardown: rank 0 did not die of SIGTERM (chained)"
[ "$(end_of 0)" = "terminated by signal 15" ] || fail "teardown: rank 0's file says '$(end_of 0)'"
r=$(ls "$(job_dir)"/rank0-*.report.json 2>/dev/null) || fail "teardown: no final report from rank 0"
lead=$(live_lead "$r" final)
[ "$lead" = "DEAD [3]" ] || fail "teardown: rank 0's final verdict '$lead', want DEAD [3]"
has_files 'rank0-*.dump.json' 1 || fail "teardown: rank 0 wrote no dump at SIGTERM"
lead=$(offline_lead)
[ "$lead" = "DEAD [3]" ] || fail "teardown: analyze's lead verdict '$lead', want DEAD [3]"
offline_summary | grep -q "exited (exit code 3)" || fail "teardown: analyze does not say 'exited (exit code 3)'"
grep -q "terminated by SIGTERM.*a consequence" "$WORK/a.json" || fail "teardown: the survivors are not shown as consequences"
echo "ok: launcher teardown: final verdict DEAD rank 3 at SIGTERM, survivors shown as consequences"

# A program with its own SIGSEGV and SIGTERM handlers (installed before NCCL starts) still gets them.
rm -rf "$NCCLWATCH_DIR"
new_launch_logs
LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 --kill-on-first-failure --term-delay-ms 300 \
    -- "$FAKE_RANK" --steps 10 --exit-rank 3 --exit-step 4 --exit-how segv --own-handlers "$WORK/own" \
    >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!
wait_for 30 launcher_done || fail "own handlers: the job did not end"
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
grep -q SIGSEGV "$WORK/own.3" 2>/dev/null || fail "own handlers: rank 3's own SIGSEGV handler did not run"
grep -q SIGTERM "$WORK/own.0" 2>/dev/null || fail "own handlers: rank 0's own SIGTERM handler did not run"
grep -q "exit rank=3 status=SIGSEGV" "$WORK/launch.out" || fail "own handlers: rank 3 did not die of SIGSEGV"
[ "$(end_of 3)" = "fatal signal 11" ] || fail "own handlers: rank 3's file says '$(end_of 3)'"
echo "ok: the program's own SIGSEGV and SIGTERM handlers ran, after the shim recorded the end"

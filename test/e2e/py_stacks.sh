#!/bin/bash
# Python stacks (format 1.5): a CPython program over the test NCCL (py_stall.py, ctypes) where rank 1 stalls in
# slow_eval while ranks 0, 2, 3 wait in all_reduce. The function and line of each appear in the shim's stall report
# (stderr and .report.json), in rank 1's dump JSON, in `analyze` (text and JSON), and in the live collector's report
# (`ncclwatch-collector serve` on loopback, the stacks carried by the ranks' digests, protocol 1.4). A process without
# Python (fake_rank) gets no stacks and says so ("not python").
# The same checks run under every CPython at hand: /usr/bin/python3 (3.11 on Debian 12: faulthandler's dump in a copy
# of the process), then python3.13 and python3.14 where on PATH (their debug offsets, read in place), and those named
# in NCW_EXTRA_PYTHONS (space or colon separated, e.g. NCW_EXTRA_PYTHONS=/tmp/py313/bin/python3.13); one that does
# not run (or lacks ctypes) is skipped, said on stdout.
. "$(dirname "$0")/lib.sh"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
PROG="$(dirname "$0")/py_stall.py"
line_of() { grep -n "# $1\$" "$PROG" | cut -d: -f1; }
WAIT=$(line_of WAIT_LINE)
STALL=$(line_of STALL_LINE)
CALLER=$(line_of CALLER_LINE)

export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_SUSPECT=0

# Runs the job under one interpreter and checks what every report says of it: check_python PYTHON.
check_python() {
    PYTHON=$1
    PYTHON_NAME="CPython $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
    RUN=$((RUN + 1))
    # The live collector the ranks stream their digests to.
    stop_serve
    rm -rf "$WORK/live"
    start_live_serve
    live_names() { [ -n "$(live_txt)" ] && grep -qF "$1" "$(live_txt)"; }
    export NCCLWATCH_DIR="$WORK/dumps-$RUN"
    export STALL_RANK=1 STALL_STEP=3 STEPS=6 STOP_FILE="$WORK/stop-$RUN"
    new_launch_logs
    NCCLWATCH_DUMP_AT_EXIT=1 LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 -- "$PYTHON" "$PROG" \
        >"$WORK/launch.out" 2>"$WORK/launch.err" &
    LAUNCH_PID=$!

    culprit="rank 1 is in slow_eval (py_stall.py:$STALL), called from train (py_stall.py:$CALLER)"
    waiters="ranks 0,2,3 wait in all_reduce at py_stall.py:$WAIT"
    # The shim's own stall report (its first line, the verdict: "[ncclwatch r0] NOT_JOINED: ..."), worded after the ranks
    # on this node published their stacks.
    stall_line() { grep -E "^\[ncclwatch r[0-9]+\] NOT_JOINED: " "$WORK/launch.err" | grep -F "$culprit" | head -1; }
    stall_seen() { [ -n "$(stall_line)" ]; }
    wait_for 40 stall_seen || fail "$PYTHON_NAME: no stall report naming '$culprit'"
    stall_line | grep -qF "$waiters" || fail "$PYTHON_NAME: the stall report does not say '$waiters': $(stall_line)"
    grep -q "NOT_JOINED: .*$culprit" "$WORK/launch.err" || fail "$PYTHON_NAME: the culprit's frame is not on the NOT_JOINED line"
    grep -q "loader" "$WORK/launch.err" && fail "$PYTHON_NAME: the report names the loader thread, not the one that issued NCCL calls"
    wait_for 10 has_files '*.report.json' 1 || fail "$PYTHON_NAME: no .report.json"
    grep -qF "$culprit" "$(job_dir)"/*.report.json || fail "$PYTHON_NAME: .report.json does not name '$culprit'"

    # Rank 1's dump (asked for by the stalled ranks): its stacks, the thread that issued NCCL calls in slow_eval.
    wait_for 10 has_files 'rank1-*.dump.json' 1 || fail "$PYTHON_NAME: no dump of rank 1"
    d1=$(ls "$(job_dir)"/rank1-*.dump.json)
    got=$(json_get "$d1" "'%s:%s' % (d['python_stacks']['where']['function'], d['python_stacks']['where']['line'])")
    [ "$got" = "slow_eval:$STALL" ] || fail "$PYTHON_NAME: rank 1's dump: python_stacks.where is $got, want slow_eval:$STALL"
    [ "$(json_get "$d1" "d['python_stacks']['status']")" = captured ] || fail "$PYTHON_NAME: rank 1's dump: stacks not captured"
    nthreads=$(json_get "$d1" "len(d['python_stacks']['threads'])")
    [ "$nthreads" -ge 2 ] || fail "$PYTHON_NAME: rank 1's dump: $nthreads Python threads, want the main thread and the loader"

    # analyze while the job is stalled: text and JSON.
    "$NCW_COLLECTOR" analyze --timeout 1 "$(job_dir)" >"$WORK/analysis.txt"
    grep -qF "$culprit" "$WORK/analysis.txt" || { cat "$WORK/analysis.txt" >&2; fail "$PYTHON_NAME: analyze (text) does not say '$culprit'"; }
    grep -q "Python stacks" "$WORK/analysis.txt" || fail "$PYTHON_NAME: analyze (text) shows no Python stacks"
    grep -q "File \".*py_stall.py\", line $STALL in slow_eval" "$WORK/analysis.txt" ||
        fail "$PYTHON_NAME: analyze (text) does not show slow_eval's frame"
    "$NCW_COLLECTOR" analyze --json --timeout 1 "$(job_dir)" >"$WORK/analysis.json"
    got=$(json_get "$WORK/analysis.json" "d['verdicts'][0]['culprits'][0]['python_where']")
    [ "$got" = "slow_eval (py_stall.py:$STALL), called from train (py_stall.py:$CALLER)" ] ||
        fail "$PYTHON_NAME: analyze --json: culprit's python_where is '$got'"
    json_get "$WORK/analysis.json" "d['verdicts'][0]['headline']" | grep -qF "$culprit" ||
        fail "$PYTHON_NAME: analyze --json: the headline does not name the frame"

    # The live collector's report: the same verdict line, naming the frames, and the stacks section.
    # The live report is rewritten as digests arrive: wait until it names the culprit's frame and every waiting rank's.
    wait_for 20 live_names "$culprit" ||
        fail "$PYTHON_NAME: the live report does not name '$culprit': $(head -20 "$(live_txt)" 2>/dev/null) $(tail -5 "$WORK/serve.err")"
    wait_for 20 live_names "$waiters" || fail "$PYTHON_NAME: the live report does not say '$waiters': $(head -5 "$(live_txt)")"
    lt=$(live_txt)
    grep -q "^NOT_JOINED: .*$culprit" "$lt" || fail "$PYTHON_NAME: the live report's verdict line does not name the frame: $(head -5 "$lt")"
    grep -q "File \".*py_stall.py\", line $STALL in slow_eval" "$lt" || fail "$PYTHON_NAME: the live report shows no slow_eval frame"
    lj=$(dirname "$lt")/live-report.json
    json_get "$lj" "d['verdicts'][0]['headline']" | grep -qF "$culprit" || fail "$PYTHON_NAME: live-report.json's headline does not name the frame"
    got=$(json_get "$lj" "[r['python']['where']['function'] for r in d['ranks'] if r['global_rank'] == 1 and 'python' in r]")
    [ "$got" = "['slow_eval']" ] || fail "$PYTHON_NAME: live-report.json: rank 1's python.where.function is $got, want slow_eval"

    # The culprit moves on: the job ends cleanly.
    touch "$STOP_FILE"
    wait "$LAUNCH_PID"
    rc=$?
    LAUNCH_PID=""
    [ "$rc" = 0 ] || fail "$PYTHON_NAME: the Python job failed (rc $rc)"

    # After the end the story is kept: nothing is hung, so the exit status is 0, and the first line says what happened,
    # with the culprit's frame of that moment (the events of .report.json), although rank 1 has moved on since.
    "$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/after.txt"
    rc=$?
    [ "$rc" = 0 ] || { cat "$WORK/after.txt" >&2; fail "$PYTHON_NAME: analyze after the end: exit $rc, want 0 (nothing is hung)"; }
    story="recovered: rank 1 held AllReduce #[0-9]* for [0-9.]* s in slow_eval (py_stall.py:$STALL), called from train"
    head -1 "$WORK/after.txt" | grep -q "^OK *$story.*; nothing is hung at the end" ||
        { cat "$WORK/after.txt" >&2; fail "$PYTHON_NAME: analyze after the end: the first line is not the recovered stall"; }
    grep -q "^Before the end" "$WORK/after.txt" || fail "$PYTHON_NAME: analyze after the end lists no 'Before the end'"
    "$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/after.json" || fail "$PYTHON_NAME: analyze --json after the end failed"
    [ "$(json_get "$WORK/after.json" "d['story'][0]['kind']")" = recovered ] || fail "$PYTHON_NAME: analyze --json: no recovered story"
    json_get "$WORK/after.json" "d['headline']" | grep -q "^$story" || fail "$PYTHON_NAME: analyze --json: the headline is not the story"
    # Rank 1's dump at its exit (Python has finalized by then: nothing to capture) keeps the stacks it had, not "not
    # python"; and its held capture (format 1.8) is the stall's, taken at the dump request.
    d1=$(ls "$(job_dir)"/rank1-*.dump.json)
    [ "$(json_get "$d1" "d['python_stacks']['status']")" = captured ] ||
        fail "$PYTHON_NAME: rank 1's dump at exit: its stacks are '$(json_get "$d1" "d['python_stacks']['status']")', want the last captured"
    [ "$(json_get "$d1" "d['header']['py_held_reason']")" = "dump request" ] ||
        fail "$PYTHON_NAME: rank 1's held capture is '$(json_get "$d1" "d['header']['py_held_reason']")', want the stall's dump request"
}

export FAKE_NCCL_LIB="$(dirname "$FAKE_RANK")/libnccl.so.2"
SERVE_PID=""
RUN=0
CHECKED=""
pythons="/usr/bin/python3"
for p in python3.13 python3.14; do
    found=$(command -v "$p" 2>/dev/null) && pythons="$pythons $found"
done
extra=${NCW_EXTRA_PYTHONS:-}
pythons="$pythons ${extra//:/ }"
for p in $pythons; do
    case " $CHECKED " in *" $p "*) continue ;; esac
    if ! "$p" -c 'import ctypes, threading' >/dev/null 2>&1; then
        echo "skip: $p (does not run, or has no ctypes)"
        continue
    fi
    check_python "$p"
    echo "ok: $PYTHON_NAME ($p)"
    CHECKED="$CHECKED $p"
done

# A process without Python: nothing of CPython is called; its dump says so.
stop_serve
unset NCCLWATCH_COLLECTOR
export NCCLWATCH_DIR="$WORK/dumps"
rm -rf "$NCCLWATCH_DIR"
NCCLWATCH_DUMP_AT_EXIT=1 run_job 2 --steps 3
[ "$JOB_RC" = 0 ] || fail "fake_rank job failed (rc $JOB_RC)"
d0=$(ls "$(job_dir)"/rank0-*.dump.json)
[ "$(json_get "$d0" "d['python_stacks']['status']")" = "not python" ] || fail "a process without Python: status is not 'not python'"
[ "$(json_get "$d0" "d['header']['py_stacks_len']")" = 0 ] || fail "a process without Python has stack text"
echo "ok: rank 1's slow_eval (line $STALL) and the waiting ranks' all_reduce (line $WAIT) in the stall report, the dump and analyze, under:$CHECKED"

#!/bin/bash
# The dead rank's last words (issue 25, format 1.9): a CPython rank (py_stall.py over the test NCCL) dies at step 3 of
# an uncaught exception, and its exit then takes 4 s (atexit work, as torch's teardown). The hook that `ncclwatch run`
# puts on PYTHONPATH (python/ncclwatch/_boot) gives the exception's words to the shim: from the exception on the rank
# is DEAD, "is exiting on an uncaught exception: RuntimeError: CUDA out of memory. ... (py_stall.py:N)", in the
# survivors' reports while it still exits, and "exited (exit code 1): RuntimeError: ..." in analyze after the end.
# The live collector (serve) says the same. The hook chains: the program's own sitecustomize still runs, and Python
# still prints the traceback.
. "$(dirname "$0")/lib.sh"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 77; }
PROG="$(dirname "$0")/py_stall.py"
RAISE=$(grep -n "# RAISE_LINE\$" "$PROG" | cut -d: -f1)
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_SUSPECT=0 FAKE_NCCL_TIMEOUT_SEC=60
# The live collector the ranks stream to: its DEAD verdict carries the words too (protocol 1.9).
start_live_serve
export FAKE_NCCL_LIB="$(dirname "$FAKE_RANK")/libnccl.so.2"
export RAISE_RANK=3 RAISE_STEP=3 STEPS=6 EXIT_SLOW_SEC=4
# The program's own sitecustomize, which the hook's must hand over to.
mkdir -p "$WORK/own"
echo 'import os; open(os.environ["OWN_MARK"] + "." + os.environ.get("RANK", "x"), "w").close()' >"$WORK/own/sitecustomize.py"
export OWN_MARK="$WORK/own/ran"
export PYTHONPATH="$NCW_SOURCE_ROOT/python/ncclwatch/_boot:$WORK/own"
LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 -- /usr/bin/python3 "$PROG" \
    >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!

words="RuntimeError: CUDA out of memory. Tried to allocate 32.00 TiB (py_stall.py:$RAISE)"
wait_for 30 grep -qF "DEAD: rank 3 (" "$WORK/launch.err" || fail "no DEAD verdict: $(grep -m3 '^\[ncclwatch' "$WORK/launch.err")"
dead=$(grep -F "DEAD: rank 3 (" "$WORK/launch.err" | head -1)
echo "$dead" | grep -qF "is exiting on an uncaught exception: $words" ||
    echo "$dead" | grep -qF "exited (exit code 1): $words" || fail "the DEAD line lacks the last words: $dead"
grep -q "Traceback (most recent call last)" "$WORK/launch.err" || fail "Python's own traceback is gone"
wait_for 20 sh -c "f=\$(ls $WORK/live/*/live-report.txt 2>/dev/null | head -1); [ -n \"\$f\" ] && grep -qF 'DEAD: rank 3 (' \"\$f\""
grep -F "DEAD: rank 3 (" "$(live_txt)" | head -1 | grep -qF "$words" ||
    fail "the live collector's DEAD lacks the words: $(grep -F 'DEAD: rank 3 (' "$(live_txt)" | head -1)"
[ -e "$OWN_MARK.3" ] || fail "the program's own sitecustomize did not run"
grep -q "Error in sitecustomize" "$WORK/launch.err" && fail "the hook's sitecustomize failed: $(grep -A1 'Error in sitecustomize' "$WORK/launch.err")"
# Without a sitecustomize of the program's own, the hook's says nothing either.
PYTHONPATH="$NCW_SOURCE_ROOT/python/ncclwatch/_boot" /usr/bin/python3 -c 'pass' 2>"$WORK/bare.err"
[ -s "$WORK/bare.err" ] && fail "the hook's sitecustomize alone writes: $(cat "$WORK/bare.err")"
hdr=$(ls "$(job_dir)"/rank3-*.ncw)
"$NCW_COLLECTOR" dump --json "$hdr" >"$WORK/dump3.json" || fail "dump of rank 3's file failed"
[ "$(json_get "$WORK/dump3.json" "d['header']['last_words']")" = "$words" ] ||
    fail "rank 3's file keeps: $(json_get "$WORK/dump3.json" "d['header'].get('last_words')")"
# After the end: its exit code and its words.
wait_for 20 sh -c "\"$NCW_COLLECTOR\" dump --json $hdr | grep -q '\"end_kind\": \"exit\"'" || fail "rank 3 never ended"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -qF "rank 3 (host" || fail "analyze's lead: $(head -1 "$WORK/analysis.txt")"
head -1 "$WORK/analysis.txt" | grep -qF "exited (exit code 1): $words" ||
    fail "analyze's lead lacks the words: $(head -1 "$WORK/analysis.txt")"
grep -q "ran out of data" "$WORK/analysis.txt" && fail "an exit code 1 is told as a rank out of data"
echo "ok: rank 3's uncaught exception in its DEAD verdict, live and after the end"

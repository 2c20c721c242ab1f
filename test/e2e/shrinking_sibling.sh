#!/bin/bash
# A rank file that shrinks under its readers harms nobody. A copy of a rank file, planted in the job folder, is cut
# to 4,096 bytes and regrown again and again while the watchdogs read the folder (a rank sleeps in a step so that the
# others stall and analyse it with their rings, and every second the signature check reads every file): every rank
# lives to the end and the job ends with 0. Then `analyze` runs while a file is cut and restored in a loop: it never
# dies by a signal (exit 0..2 only) and names the damaged file.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=1
launch_job 4 --steps 10 --sleep-rank 2 --sleep-step 4 --sleep-ms 5000 --hold-ms 3000

wait_for 30 has_files '*.ncw' 4 || fail "not every rank has a rank file"
d=$(job_dir)
f=$(ls "$d"/rank0-*.ncw)
copy="$d/rank9-copy-$(basename "$f")"
full=$(stat -c %s "$f")
# Truncated and regrown while the job runs, bounded: 60 rounds, or until the job ends.
for i in $(seq 60); do
    kill -0 "$LAUNCH_PID" 2>/dev/null || break
    cp "$f" "$copy.tmp" && mv "$copy.tmp" "$copy"  # whole, so a watchdog opens it at full size
    sleep 0.1
    truncate -s 4096 "$copy"
    sleep 0.1
    truncate -s "$full" "$copy"  # regrown (zeros past the header page)
    sleep 0.05
done
wait "$LAUNCH_PID"
rc=$?
LAUNCH_PID=""
[ $rc = 0 ] || fail "job exit $rc with a shrinking sibling file, want 0"
grep -qi "sigbus\|bus error\|signal 7\|killed by signal" "$WORK/launch.err" "$WORK/launch.out" &&
    fail "a rank died by a signal"
# The watchdogs did analyse the folder (the stall was reported), and each names the damaged copy once at most.
grep -q "STUCK\|NOT_JOINED\|stalled\|stall" "$WORK/launch.err" || fail "no watchdog analysed a stall"
named=$(grep -c "skipping rank file .*rank9-copy" "$WORK/launch.err")
[ "$named" -ge 1 ] || fail "no watchdog named the shrinking copy"
[ "$named" -le 4 ] || fail "the shrinking copy was named $named times, want once per rank at most"

# `analyze` over a folder whose file is cut and restored in a loop: bounded to 200 runs or 20 s.
mkdir -p "$WORK/offline"
cp "$d"/rank[0-3]-*.ncw "$WORK/offline/"
victim=$(ls "$WORK/offline"/rank1-*.ncw)
cp "$victim" "$WORK/victim.orig"
(
    end=$(($(date +%s) + 25))
    while [ "$(date +%s)" -lt "$end" ] && [ ! -e "$WORK/stop" ]; do
        truncate -s 4096 "$victim"
        cp "$WORK/victim.orig" "$victim"
    done
) &
cutter=$!
runs=0
named=0
end=$(($(date +%s) + 20))
while [ $runs -lt 200 ] && [ "$(date +%s)" -lt "$end" ]; do
    "$NCW_COLLECTOR" analyze "$WORK/offline" >"$WORK/analysis.txt" 2>&1
    rc=$?
    [ $rc -le 2 ] || { touch "$WORK/stop"; wait $cutter; fail "analyze exit $rc (killed by a signal?) on run $runs"; }
    grep -q "$(basename "$victim")" "$WORK/analysis.txt" && named=$((named + 1))
    runs=$((runs + 1))
done
touch "$WORK/stop"
wait $cutter
[ $named -ge 1 ] || fail "analyze never named the damaged file in $runs runs"
echo "ok: every rank lived, job rc 0; analyze ran $runs times over a shrinking file, named it in $named"

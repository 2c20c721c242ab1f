#!/bin/bash
# A rank's own file cut under it (issue 28, point 1): a cleanup script, a quota or an operator truncates a running
# rank's file. The pages past the new end would raise SIGBUS at the rank's next record (5405922: "exit rank=1
# status=SIGBUS", 2 of 2); now the shim takes them into memory and the job runs to its end, every rank exiting 0,
# and the rank says so once.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=30
# About 3 s of steps (5 ms each), so that the cut lands while the ranks record.
launch_job 2 --steps 600 --step-ms 5
wait_for 20 has_files 'rank1-*.ncw' 1 || fail "no rank file for rank 1"
f=$(ls "$(job_dir)"/rank1-*.ncw)
# Cut once rank 1 has recorded 50 all_reduces, with hundreds still to come.
wait_for 20 issued_at_least "$f" 50 || fail "rank 1 did not record 50 all_reduces"
truncate -s 4096 "$f" || fail "truncate failed"
wait "$LAUNCH_PID"
rc=$?
LAUNCH_PID=""
grep -q "exit rank=1 status=0" "$WORK/launch.out" ||
    fail "rank 1 did not exit 0 after its file was cut: $(grep 'exit rank' "$WORK/launch.out" | tr '\n' ' ')"
[ $rc = 0 ] || fail "the job exited $rc: $(grep 'exit rank' "$WORK/launch.out" | tr '\n' ' ')"
n=$(grep -c "r1\] this rank's file .*rank1-.*\.ncw was cut short by another process" "$WORK/launch.err")
[ "$n" = 1 ] || fail "rank 1 said the cut $n times, want once: $(grep -m3 ncclwatch "$WORK/launch.err")"
echo "ok: rank 1's file cut to 4096 bytes mid-run; every rank exited 0, and rank 1 said it once"

#!/bin/bash
# Rank 3 runs with NCCL_ALGO=Tree, the others with Ring (issue 25). The test NCCL models what NCCL does: ranks whose
# algorithms differ never complete a collective, every rank inside it. The lead is SETTING_DIFFERS naming rank 3 and
# NCCL_ALGO, not STUCK_IN_NCCL ("check the network path"), which follows as its consequence.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_TIMEOUT_SEC=60
cat >"$WORK/rank.sh" <<EOS
#!/bin/sh
if [ "\$RANK" = 3 ]; then export NCCL_ALGO=Tree; else export NCCL_ALGO=Ring; fi
exec "$FAKE_RANK" "\$@"
EOS
chmod +x "$WORK/rank.sh"
LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 -- "$WORK/rank.sh" --steps 4 \
    >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!

every_stall_led_by 4 SETTING_DIFFERS "[3]"
grep -q "SETTING_DIFFERS: rank 3 (.*): NCCL_ALGO differs across ranks: rank 3 has 'Tree'; the majority (3 of 4) has 'Ring' (a setting NCCL needs every rank to agree on); 4 ranks wait in AllReduce #1" \
    "$WORK/launch.err" || fail "the stderr report: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
grep -m1 "^\[ncclwatch r" "$WORK/launch.err" | grep -q "\] SETTING_DIFFERS: rank 3 " ||
    fail "the first line is not the setting: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
grep -Eq "^\[ncclwatch r[0-9]+\] +STUCK_IN_NCCL: .*a consequence, not the cause: NCCL_ALGO differs" "$WORK/launch.err" ||
    fail "STUCK_IN_NCCL is not said as the setting's consequence"
grep -E "^\[ncclwatch r[0-9]+\] +STUCK_IN_NCCL" "$WORK/launch.err" |
    grep -vq "a consequence, not the cause: NCCL_ALGO differs" &&
    fail "STUCK_IN_NCCL is reported as a cause: $(grep -m1 -E '\] +STUCK_IN_NCCL' "$WORK/launch.err")"

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 3 (.*): NCCL_ALGO differs across ranks" ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"
grep -q "setting_mismatch\|NCCL_ALGO differs across ranks" "$WORK/analysis.txt" || fail "the audit does not say it"
echo "ok: NCCL_ALGO on rank 3 leads the stall"

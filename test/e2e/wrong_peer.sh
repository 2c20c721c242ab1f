#!/bin/bash
# A pipeline stage that sends to the wrong peer (issue 25): at step 5 rank 2 sends its activations to rank 0 instead
# of rank 3. Rank 2 waits in its first ever send to rank 0, which never posts a receive from 2; rank 3 waits in its
# receive from 2, ranks 0 and 1 in the gradients' chain. Every report names rank 2, the send, its peer, and who waits
# on it; analyze of the folder while it hangs says the same.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_TIMEOUT_SEC=60
launch_job 4 --steps 10 --pipeline --wrong-peer-rank 2 --wrong-peer-step 5

every_stall_led_by 4 MISMATCH "[2]"
grep -q "MISMATCH: rank 2 (.*) waits in Send #1 to rank 0 on communicator .*, which has never posted a Recv from it: a send no receive matches (a wrong peer?)" \
    "$WORK/launch.err" || fail "the stderr report: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
grep -q "waiting on rank 2: rank 1 in recv #6 from it, rank 3 in recv #6 from it" "$WORK/launch.err" ||
    fail "the report does not say who waits on rank 2: $(grep -m1 'p2p: rank 2 waits' "$WORK/launch.err")"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 2 (.*) waits in Send #1 to rank 0 " ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"
echo "ok: the send to the wrong peer named, with its peer and who waits on it"

#!/bin/bash
# Two ranks that swap a tensor every step (issue 41): rank 0 sends first then receives, rank 1 receives first then
# sends, each on its own (dist.send, dist.recv). At step 5 both send first: each send waits for a receive the peer has
# not posted, blocked in its own send. Every report (each shim's, the live collector's in rank 0, analyze while it
# hangs) leads with one DEADLOCK naming ranks 0 and 1, both sends and the order that fixes it; ranks 2 and 3, which
# wait in the next all_reduce for them, follow as its consequence.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
launch_job 4 --steps 10 --swap-pair --swap-deadlock-step 5 --count 4096

want="DEADLOCK: rank 0 (.*) and rank 1 (.*) wait on each other's sends and receives on communicator 0x[0-9a-f]* (world, 4 ranks): rank 0 waits in Send #6 to rank 1, whose Recv #6 from it is not posted: rank 1 is blocked in its own Send #6 to rank 0; rank 1 waits in Send #6 to rank 0, whose Recv #6 from it is not posted: rank 0 is blocked in its own Send #6 to rank 1: issue the Recv first on one side, or post both in one group (batch_isend_irecv)"
every_stall_led_by 4 DEADLOCK "[0, 1]"
shim_and_live_lead_with "$want"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 0 (.*) and rank 1 (.*) wait on each other's sends and receives" ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"

# The swap in the right order every step: nothing is reported.
quiet_clean_run 4 --steps 10 --swap-pair --count 4096
echo "ok: two ranks that both send first named as one DEADLOCK, live, by the shims and by analyze; the clean swap quiet"

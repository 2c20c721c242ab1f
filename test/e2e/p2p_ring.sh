#!/bin/bash
# A batch_isend_irecv ring with one irecv left out (issue 41): every step each rank sends to rank + 1 and receives from
# rank - 1 in one group, then all-reduces outside it. At step 5 rank 2 leaves its receive from rank 1 out: rank 1's
# send waits for it (blocked in its group), rank 2 goes on into the all_reduce and waits there for rank 1. The
# collective alone would blame rank 1 (behind it); every report (each shim's, the live collector's in rank 0, analyze)
# leads with rank 2, the receive it never posted and rank 1's send that waits on it.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
launch_job 4 --steps 10 --ring --ring-skip-recv-rank 2 --ring-skip-recv-step 5 --count 4096

want="MISMATCH: rank 2 (.*) never posted Recv #6 from rank 1 on communicator 0x[0-9a-f]* (world, 4 ranks) and went on into other ops; rank 1 waits in Send #6 to it since [-0-9T:.+]*: a send no receive matches (one left out of a batch_isend_irecv, or a wrong peer?)"
every_stall_led_by 4 MISMATCH "[2]"
shim_and_live_lead_with "$want"
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
[ "$(json_get "$WORK/analysis.json" "d['verdicts'][0]['kind']") $(json_get "$WORK/analysis.json" "d['verdicts'][0]['unposted']")" = "MISMATCH True" ] ||
    fail "analyze leads with $(json_get "$WORK/analysis.json" "d['verdicts'][0]['headline']")"

# The ring with every receive: nothing is reported (without the collector in rank 0, as in p2p_sizes.sh).
quiet_clean_run 4 --steps 10 --ring --count 4096
echo "ok: a ring's left-out receive named on its rank, not on the rank its send holds behind the all_reduce"

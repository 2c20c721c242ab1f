#!/bin/bash
# An MoE layer's all-to-all with a stale split table (issue 41): every step each rank sends and receives rows of
# uneven split sizes to and from every other rank in one group (all_to_all_single), then all-reduces. At step 5 rank 2
# sends rank 0 twice the rows rank 0 expects from it: as NCCL, rank 0's receive completes and rank 2's send waits for
# the rest. The others wait in the next all_reduce. Every report (each shim's, the live collector's in rank 0, analyze
# while it hangs and after the end) leads with the MISMATCH of that pair's sizes, naming rank 2, its peer and both sizes;
# the collective's stall follows as its consequence.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
launch_job 4 --steps 10 --a2a --a2a-stale-rank 2 --a2a-stale-step 5 --count 4096

want="MISMATCH: rank 2 (.*) sends 1,536 float32 (6 KiB) to rank 0 in Send #6 on communicator 0x[0-9a-f]* (world, 4 ranks), which expects 768 (3 KiB) from it in its Recv #6: the all_to_all split sizes disagree"
every_stall_led_by 4 MISMATCH "[2]"
grep -Eq "^\[ncclwatch r[0-9]+\] +NOT_JOINED: rank 2 .*a consequence, not the cause: .*Send #6 to rank 0" "$WORK/launch.err" ||
    fail "the all_reduce's stall is not said as a consequence of the pair: $(grep -c '^\[ncclwatch' "$WORK/launch.err") lines"
shim_and_live_lead_with "$want"

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 2 (.*) sends 1,536 float32 (6 KiB) to rank 0 in Send #6 " ||
    fail "analyze's first line while it hangs: $(head -1 "$WORK/analysis.txt")"
stop_job
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
[ "$(json_get "$WORK/analysis.json" "d['verdicts'][0]['kind']")" = MISMATCH ] ||
    fail "analyze --json after the end leads with $(json_get "$WORK/analysis.json" "d['verdicts'][0]['headline']")"
json_get "$WORK/analysis.json" "d['verdicts'][0]['headline']" | grep -q "sends 1,536 float32 (6 KiB) to rank 0" ||
    fail "analyze after the end: $(json_get "$WORK/analysis.json" "d['verdicts'][0]['headline']")"

# The same all-to-all with nothing stale: nothing is reported, and analyze finds nothing.
quiet_clean_run 4 --steps 10 --a2a --count 4096
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/clean.txt" || fail "analyze of the clean job: $(head -1 "$WORK/clean.txt")"
echo "ok: the all-to-all's pair whose sizes disagree named, live, by the shims and after the end; the clean one quiet"

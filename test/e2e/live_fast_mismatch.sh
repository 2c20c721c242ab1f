#!/bin/bash
# A communicator that issues more ops between two digests than the newest 16 a digest used to carry (protocol 1.12):
# 4 ranks, 60 all-reduces in about 1.2 s (20 ms a step), a digest every 3 s; rank 3 broadcasts where the others
# all-reduce at step 30. The live collector names the MISMATCH: every op reached it, not only the newest 16 of each
# digest (before 1.12 no report came). Bounded: ~5 s.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
trap 'stop_serve; cleanup' EXIT
serve_into live --timeout 30 --dead-after 30
export NCCLWATCH_DIGEST_MS=3000 NCCLWATCH_TIMEOUT_SEC=30
# The collector's verdict is the one under test: the node's own watchdogs, which read the ranks' files, would find it
# too, so they do not compare signatures.
export NCCLWATCH_MISMATCH_CHECK=0
launch_job 4 --steps 60 --count 4096 --step-ms 20 --mismatch-rank 3 --mismatch-step 30 --mismatch-kind op \
    --hold-ms 60000
wait_for 20 has_report live || fail "no live report: $(cat "$WORK/live.err")"
r=$(report_of live)
[ "$(json_get "$r" "d['verdicts'][0]['kind']")" = MISMATCH ] || fail "verdict: $(json_get "$r" "d['verdicts'][0]")"
[ "$(json_get "$r" "d['verdicts'][0]['culprits']")" = "[3]" ] || fail "culprits: $(json_get "$r" "d['verdicts'][0]")"
[ "$(json_get "$r" "d['verdicts'][0]['seq']")" = 31 ] || fail "seq: $(json_get "$r" "d['verdicts'][0]")"
echo "ok: the live collector names rank 3's broadcast at #31, one of the 60 ops a digest carried"

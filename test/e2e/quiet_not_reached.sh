#!/bin/bash
# One report per node when no rank waits (issue 43, seen on the GPU): every rank's GPU is held before the same
# all_reduce, so GPU_NOT_REACHED names them all and none waits in the op. The node's reporter is then chosen among all
# its ranks of the communicator (not among the waiting ones, none): 4 ranks sharing one stderr print the stall and
# its early suspicion once each, not once per rank; and SIGTERM's final report comes from one rank, even where that
# rank has already exited when the others judge. The whole story (suspicion, stall, dumps, final) in at most 12 lines.
. "$(dirname "$0")/lib_fakecuda.sh"
export NCCLWATCH_TIMEOUT_SEC=2
launch_job 4 --fake-cuda --steps 3 --sleep-step 2 --sleep-ms 300 --sleep-rank 0 --cuda-hold-step 2 --hold-ms 60000
wait_for 30 grep -q "^\[ncclwatch r[0-9]\] GPU_NOT_REACHED: " "$WORK/launch.err" || fail "no GPU_NOT_REACHED on stderr"
wait_for 10 has_files '*.report.json' 4 || fail "not every rank recorded the stall"
stop_job
said=$(grep -c "^\[ncclwatch r[0-9]\] GPU_NOT_REACHED: " "$WORK/launch.err")
suspected=$(grep -c "^\[ncclwatch r[0-9]\] SUSPECTED " "$WORK/launch.err")
finals=$(grep -c "^\[ncclwatch r[0-9]\] FINAL " "$WORK/launch.err")
lines=$(grep -c "^\[ncclwatch" "$WORK/launch.err")
[ "$said" = 1 ] || fail "GPU_NOT_REACHED said $said times on one node's stderr: $(grep '^\[ncclwatch r[0-9]\] [A-Z]' "$WORK/launch.err" | cut -c1-90)"
[ "$suspected" -le 1 ] || fail "the suspicion said $suspected times on one node's stderr"
[ "$finals" -le 1 ] || fail "the final report said $finals times on one node's stderr"
[ "$lines" -le 12 ] || fail "$lines lines on one node's stderr (at most 12): $(grep '^\[ncclwatch' "$WORK/launch.err" | cut -c1-90)"
echo "ok: GPU_NOT_REACHED with nobody waiting, once on the node's stderr ($lines lines; suspicion $suspected, final $finals)"

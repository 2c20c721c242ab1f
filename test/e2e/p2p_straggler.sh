#!/bin/bash
# A pipeline's slow stage (issue 41), over the test NCCL's profiler events (every send's and receive's GPU start and
# end, through our plugin): stage 2 of 4 computes 20 ms longer before each forward send, so the stages after it wait
# for it inside their receives, and the gradients of the stages before it come back that much later. While the job
# runs, stage 2's own shim names it STRAGGLER (one line, from its sends' and receives' GPU times), and so does the live
# collector in rank 0's shim; after the end analyze names it (exit 0: not a hang). The same pipeline in step names
# nobody.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN FAKE_NCCL_PROFILER_VERSION NCCLWATCH_PROFILER
export NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50

want="STRAGGLER: rank 2 (.*) is the slowest stage on communicator 0x[0-9a-f]* (world, 4 ranks): its peers consistently wait for it inside their receives from it (not a hang)"
launch_job 4 --steps 400 --count 1024 --pipeline --late-rank 2 --late-ms 20
named() { grep -q "^\[ncclwatch r2\] $want" "$WORK/launch.err"; }
wait_for 30 named || fail "stage 2's shim did not name it: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
kill -0 "$LAUNCH_PID" 2>/dev/null || fail "the job had ended before the straggler was named"
if grep "^\[ncclwatch r[013]\]" "$WORK/launch.err" | grep -q STRAGGLER; then
    fail "another stage named a straggler: $(grep '^\[ncclwatch r[013]\]' "$WORK/launch.err" | head -1)"
fi
wait_for 30 test -s "$(job_dir)/live-report.txt" || fail "no live report in the job folder"
sed -n 2p "$(job_dir)/live-report.txt" | grep -q "^$want" || fail "the live report leads with: $(sed -n 2p "$(job_dir)/live-report.txt")"
wait "$LAUNCH_PID"
LAUNCH_PID=""
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 0 ] || fail "analyze exit $rc, want 0 (a straggler is not a hang)"
head -1 "$WORK/analysis.txt" | grep -q "^VERDICT  rank 2 (.*) is the slowest stage on communicator" ||
    fail "analyze's first line: $(head -1 "$WORK/analysis.txt")"

# The same pipeline with every stage in step: nobody is named, by the shims or after the end.
quiet_clean_run 4 --steps 400 --count 1024 --pipeline
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/clean.txt"
grep -q STRAGGLER "$WORK/clean.txt" && fail "a straggler in the pipeline in step: $(head -1 "$WORK/clean.txt")"
echo "ok: a pipeline's slow stage named STRAGGLER by its own shim, live and after the end; the pipeline in step quiet"

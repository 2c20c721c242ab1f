#!/bin/bash
# Asynchronous NCCL errors are failures (issue 14): 4 ranks, rank 3 exits (_exit(3)) before all_reduce #5 while the
# others wait in it. Their calls returned nothing yet (as a GPU collective "returned" success at enqueue); a thread
# of theirs polls ncclCommGetAsyncError as PyTorch's watchdog does (--async-watchdog-ms), which the test NCCL answers
# with ncclRemoteError once rank 3's process is gone, and aborts the communicator. The shim records that error as the
# communicator's first failure (its seq, result and time in the comm slot); analyze, once every process has ended,
# keeps rank 3 as the culprit (DEAD) and shows the survivors' failures as consequences.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=5
export FAKE_NCCL_TIMEOUT_SEC=20

launcher_done() { ! kill -0 "$LAUNCH_PID" 2>/dev/null; }
launch_job 4 --steps 10 --exit-rank 3 --exit-step 4 --exit-how _exit --exit-code 3 --async-watchdog-ms 50
wait_for 30 launcher_done || fail "the job did not end"
wait "$LAUNCH_PID" 2>/dev/null
LAUNCH_PID=""
grep -q "rank [0-2]: watchdog: async error remote process exited" "$WORK/launch.err" || fail "no survivor's watchdog saw the async error: $(tail -5 "$WORK/launch.err")"
wait_for 10 ranks_gone || fail "the ranks' processes did not end"

# Each survivor failed at all_reduce #5. The first watchdog to see the remote error aborts its communicator, and the
# test NCCL fails the other survivors' blocked calls at once ("a peer aborted"): some record that call's
# ncclSystemError first; at least one records the async ncclRemoteError as its first failure, with its time.
remote=0
for rank in 0 1 2; do
    "$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank$rank-*.ncw)" >"$WORK/d$rank.json" || fail "rank $rank's file unreadable"
    got=$(json_get "$WORK/d$rank.json" "[(c['ops_failed'] > 0, c['first_failed_seq'], c['first_failed_result'], c['async_error'], (c['first_failed_ms'] or 0) > 0) for c in d['comms']][0]")
    case "$got" in
        "(True, 5, 6, 6, True)") remote=$((remote + 1)) ;;
        "(True, 5, 2, "*", True)") ;;
        *) fail "rank $rank's slot: (failed, first_failed_seq, first_failed_result, async_error, timed) = $got, want a failure at all_reduce #5 (ncclRemoteError 6 from the async error, or the aborted call's ncclSystemError 2)" ;;
    esac
done
[ "$remote" -ge 1 ] || fail "no survivor recorded the async ncclRemoteError as its failure"

"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/a.json" 2>"$WORK/a.err"
lead=$(json_get "$WORK/a.json" "d['verdicts'][0]['kind'] + ' ' + str([c['comm_rank'] for c in d['verdicts'][0]['culprits']])")
[ "$lead" = "DEAD [3]" ] || fail "analyze's lead verdict '$lead' once the job ended, want DEAD [3]: $(head -c 3000 "$WORK/a.json")"
kinds=$(json_get "$WORK/a.json" "sorted(set(v['kind'] for v in d['verdicts']))")
case "$kinds" in *ASYNC_ERROR*) fail "analyze leads or lists ASYNC_ERROR for the survivors' consequence: $kinds" ;; esac
grep -q "AllReduce #5 [^\"]*failed (ncclRemoteError 6)[^\"]*a consequence" "$WORK/a.json" ||
    fail "analyze does not show the async ncclRemoteError as a consequence"
n=$(grep -o "AllReduce #5 [^\"]*failed (nccl[A-Za-z]*Error [0-9])[^\"]*a consequence" "$WORK/a.json" | wc -l)
[ "$n" -ge 3 ] || fail "analyze does not show the 3 survivors' failures as consequences ($n): $(grep -o '"[^"]*consequence[^"]*"' "$WORK/a.json" | head)"
echo "ok: the survivors' async ncclRemoteError is recorded as their failure at all_reduce #5; analyze: DEAD rank 3, the failures its consequences"

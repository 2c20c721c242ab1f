#!/bin/bash
# 200 communicators alive at once, past the rank file's 64 comm slots; the steps run on the 150th (which has no slot)
# and rank 2 skips an all_reduce on it. The live collector sees it through the digests, which carry the communicators
# without a slot: `serve` and then NCCLWATCH_COLLECTOR=auto name rank 2 on that communicator. Offline, analyze names it
# too (from the ring) and says the communicator had no comm slot.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
trap 'stop_serve; cleanup' EXIT
now_s() { date +%s.%N; }
since() { "$PY" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now_s)"; }

# The verdict's communicator is none of rank 0's comm slots (it is the 150th of 200 alive, past the table).
check_verdict() {
    local report=$1 what=$2
    [ "$(json_get "$report" "d['verdicts'][0]['kind']")" = NOT_JOINED ] ||
        fail "$what: verdict $(json_get "$report" "d['verdicts'][0]")"
    [ "$(json_get "$report" "d['verdicts'][0]['culprits']")" = "[2]" ] ||
        fail "$what: culprits $(json_get "$report" "d['verdicts'][0]['culprits']")"
    comm=$(json_get "$report" "d['verdicts'][0]['comm_id']")
    "$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank0-*.ncw)" >"$WORK/dump0.json" || fail "$what: dump failed"
    in_table=$("$PY" -c "
import json, sys
d = json.load(open(sys.argv[1]))
num = lambda v: v if isinstance(v, int) else int(str(v), 16)
ids = {num(c['comm_id']) for c in d['comms']}
print(len(ids), num(sys.argv[2]) in ids)" "$WORK/dump0.json" "$comm")
    [ "$in_table" = "64 False" ] || fail "$what: comm $comm vs rank 0's comm table: $in_table (want 64 slots, not in them)"
}

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30  # the live collector's report is the one under test
ARGS=(--steps 10 --alive-comms 200 --steps-comm 150 --skip-rank 2 --skip-step 5 --hold-ms 60000)

# ---- 1. serve ----
mkdir -p "$WORK/serve"
"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 2 --dead-after 2 --out "$WORK/serve" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
export NCCLWATCH_COLLECTOR="127.0.0.1:$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")"
t0=$(now_s)
launch_job 4 "${ARGS[@]}"
wait_for 60 has_report serve || fail "serve: no live report: $(tail -5 "$WORK/serve.err")"
serve_s=$(since "$t0")
check_verdict "$(report_of serve)" serve
grep -q "the other .* are watched by this process only" "$WORK/launch.err" &&
    fail "a digest could not hold every communicator: $(grep -m1 'watched by this process only' "$WORK/launch.err")"
stop_job
stop_serve

"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "analyze exit $rc, want 1 (hang found)"
grep -q "NOT_JOINED" "$WORK/analysis.txt" || fail "analyze does not say NOT_JOINED: $(head -20 "$WORK/analysis.txt")"
grep -q "had no comm slot" "$WORK/analysis.txt" || fail "analyze does not say the communicators had no comm slot"
rm -rf "$NCCLWATCH_DIR"

# ---- 2. NCCLWATCH_COLLECTOR=auto (rank 0 runs the collector; its timeout is the shim's, so the ranks' own
# watchdogs are quiet for longer than the live verdict takes) ----
export NCCLWATCH_COLLECTOR=auto NCCLWATCH_TIMEOUT_SEC=3
t0=$(now_s)
launch_job 4 "${ARGS[@]}"
auto_report() { [ -n "$(job_dir)" ] && [ -s "$(job_dir)/live-report.json" ]; }
wait_for 60 auto_report || fail "auto: no live report in the job folder"
auto_s=$(since "$t0")
check_verdict "$(job_dir)/live-report.json" auto
stop_job
echo "ok: a stall on the 150th of 200 live communicators (no comm slot) is named live: serve ${serve_s} s, auto" \
    "${auto_s} s after the launch (200 communicators made first); analyze names it from the ring"

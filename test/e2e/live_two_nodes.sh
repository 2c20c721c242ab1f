#!/bin/bash
# One job on two "nodes" with one live collector, as users run many nodes: ranks 0-1 write into node A's folder, 2-3
# into node B's (NCCLWATCH_DIR per rank, as two hosts' local disks), every rank streams to one
# `ncclwatch-collector serve`, which takes its timeout from the ranks (no --timeout). For each hang the job's verdict
# must be the same three times: the live collector's report, `analyze` of both folders after the end, and every
# node's stderr (node A's ranks cannot see the culprit, so they lead with the collector's verdict, marked as such):
#   1. rank 3 skips an all_reduce: NOT_JOINED rank 3;
#   2. rank 3 calls _exit(3) (Python's os._exit) and the launcher tears the job down 0.3 s later, as torchrun does:
#      DEAD rank 3, exit code 3, reported by the collector before the teardown ends the others;
#   3. rank 3 issues a smaller all_reduce: MISMATCH rank 3 (node A's local rank 0 says the collector's verdict);
#   4. rank 3 leaves the loop early and exits with code 0 (exit handlers run, its Bye goes out: a run out of data):
#      DEAD rank 3, exit code 0, not a rank that merely has not joined yet;
#   5. a pipeline (each rank a stage, send/recv only) whose stage 2 is away in its own code before its send: NOT_JOINED
#      rank 2, judged from the point-to-point counts each rank's State carries (node A's ranks wait on rank 1 and 2);
#   6. 1 and 2 again with a relay per node (`ncclwatch-collector relay`, as at thousands of nodes, the ranks of each
#      node pointed at theirs): the same verdicts in the same three places;
#   7. an MoE all-to-all (a group of sends and receives with every rank) whose rank 3 sends rank 0, on the other node,
#      twice the rows rank 0 expects: MISMATCH rank 3, from the sizes each rank's State carries (protocol 1.13);
#   8. ranks 0 and 1 that both send first, each then blocked in its send: DEADLOCK ranks 0 and 1.
. "$(dirname "$0")/lib.sh"
SERVE_PID=""
RELAY_PIDS=()
stop_relays() {
    for p in "${RELAY_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    RELAY_PIDS=()
    unset RELAY_A RELAY_B
}
trap 'stop_relays; stop_serve; cleanup' EXIT
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_DIGEST_MS=50
two_nodes

start_serve() {
    mkdir -p "$WORK/$1"
    "$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --dead-after 2 --out "$WORK/$1" >"$WORK/$1.out" 2>"$WORK/$1.err" &
    SERVE_PID=$!
    wait_for 10 grep -q "listening on" "$WORK/$1.out" || fail "serve did not start: $(cat "$WORK/$1.err")"
    grep -q "timeout each job's own" "$WORK/$1.out" || fail "serve should take the ranks' timeout: $(head -1 "$WORK/$1.out")"
    export NCCLWATCH_COLLECTOR="127.0.0.1:$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$1.out")"
}
# launch NAME [launcher options --] fake_rank options...
launch() {
    local opts=()
    shift  # the name: for the reader
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    rm -rf "$NODES"
    new_launch_logs
    LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 "${opts[@]}" -- "$WORK/per_node.sh" \
        "$FAKE_RANK" --count 4096 "$@" >"$WORK/launch.out" 2>"$WORK/launch.err" &
    LAUNCH_PID=$!
}
# The lead verdict of a JSON report (live or analyze) as "KIND r<global ranks>".
lead() {
    json_get "$1" "(lambda v: v['kind'] + ' r' + ','.join(str(c['global_rank'] if isinstance(c, dict) else c) for c in v['culprits']))(d['verdicts'][0])"
}
lead_is() { [ -f "$1" ] && [ "$(lead "$1")" = "$2" ]; }
has_files_in() { [ "$(ls "$1"/*/$2 2>/dev/null | wc -l)" -ge "$3" ]; }
# check_same NAME WANT: the collector's and analyze's lead verdicts, and every rank's stderr.
check_same() {
    local name=$1 want=$2 live got line
    live=$(lead "$(report_of "$name")")
    [ "$live" = "$want" ] || fail "$name: the live collector says $live, want $want"
    "$NCW_COLLECTOR" analyze --json "$NODES/node-a" "$NODES/node-b" >"$WORK/$name.analyze.json"
    got=$(lead "$WORK/$name.analyze.json")
    [ "$got" = "$want" ] || fail "$name: analyze of both folders says $got, want $want"
    echo "ok: $name: the live collector and analyze of both folders: $want"
}
# node_a_quotes NAME KIND: node A's waiting ranks cannot see rank 3: their stall report leads with the collector's
# verdict, marked as such, in the same words as the collector's report.
node_a_quotes() {
    local name=$1 kind=$2 line
    line=$(json_get "$(report_of "$name")" "d['verdicts'][0]['headline']")
    wait_for 10 grep -q "the job's verdict, from the live collector" "$WORK/launch.err" ||
        fail "$name: node A's ranks do not lead with the collector's verdict"
    grep "the job's verdict, from the live collector" "$WORK/launch.err" | grep -q "$kind: " ||
        fail "$name: the quoted verdict is not $kind: $(grep "the job's verdict" "$WORK/launch.err" | head -1)"
    grep -qF "$line" "$WORK/launch.err" || fail "$name: the collector's words are not on the ranks' stderr: $line"
    for r in "$NODES"/node-a/*/rank[01]-*.report.json; do
        got=$(json_get "$r" "[e['collector_verdict'] for e in d['events'] if e['type']=='stall'][0] or ''")
        [[ "$got" == *"$kind: "* ]] || fail "$name: $r: the stall event carries no collector verdict ($got)"
    done
    echo "ok: $name: node A's ranks lead with the collector's $kind"
}

# run_skip NAME: rank 3 skips an all_reduce: NOT_JOINED rank 3, quoted by node A.
run_skip() {
    local n=$1
    launch "$n" -- --steps 10 --skip-rank 3 --skip-step 5 --hold-ms 60000
    wait_for 30 has_report "$n" || fail "$n: no live report: $(cat "$WORK/$n.err")"
    wait_for 30 has_files_in "$NODES/node-a" '*.report.json' 2 || fail "$n: node A's ranks wrote no report"
    node_a_quotes "$n" NOT_JOINED
    stop_job
    check_same "$n" "NOT_JOINED r3"
}
# run_dies NAME: rank 3 exits with code 3; the launcher tears the rest down 0.3 s later: DEAD rank 3, exit code 3,
# reported before the teardown.
run_dies() {
    local n=$1 r
    launch "$n" --kill-on-first-failure --term-delay-ms 300 -- --steps 10 --pause-step 3 --pause-ms 1000 --exit-rank 3 --exit-step 5 --exit-code 3 --exit-how _exit --hold-ms 60000
    wait_for 30 grep -q "^exit rank=0" "$WORK/launch.out" || fail "$n: the launcher did not end the job"
    wait_for 10 has_report "$n" || fail "$n: no live report before the teardown: $(cat "$WORK/$n.err")"
    r=$(report_of "$n")
    [ "$(lead "$r")" = "DEAD r3" ] || fail "$n: the live collector says $(lead "$r"), want DEAD r3"
    json_get "$r" "d['verdicts'][0]['headline']" | grep -q "exit code 3" || fail "$n: the verdict does not say exit code 3"
    wait "$LAUNCH_PID" 2>/dev/null
    LAUNCH_PID=""
    check_same "$n" "DEAD r3"
}

# ---- 1. a skipped all_reduce ----
start_serve skip
run_skip skip
stop_serve

# ---- 2. rank 3 exits with code 3; the launcher tears the rest down 0.3 s later ----
start_serve dies
run_dies dies
stop_serve

# ---- 3. a smaller all_reduce on rank 3 ----
start_serve mismatch
launch mismatch -- --steps 10 --mismatch-rank 3 --mismatch-step 5 --mismatch-kind count --hold-ms 60000
wait_for 30 has_report mismatch || fail "mismatch: no live report: $(cat "$WORK/mismatch.err")"
wait_for 20 lead_is "$(report_of mismatch)" "MISMATCH r3" || fail "mismatch: the live collector says $(lead "$(report_of mismatch)")"
# Node A's ranks see no mismatch of their own (ranks 2,3 are not in their folder): its local rank 0 says the job's.
wait_for 10 grep -q "^\[ncclwatch r0\] JOB VERDICT (live collector): MISMATCH: rank 3 " "$WORK/launch.err" ||
    fail "mismatch: node A's local rank 0 does not say the collector's verdict: $(grep -c 'JOB VERDICT' "$WORK/launch.err")"
stop_job
check_same mismatch "MISMATCH r3"
stop_serve

# ---- 4. rank 3 exits 0 early (exit handlers run); the others wait ----
# The pause (as run_dies's) lets every rank's digest client connect first: on a loaded machine a rank that exits
# before its client has said Hello is not visible to the collector (UNKNOWN r3, "not visible from here").
start_serve exit0
launch exit0 -- --steps 10 --pause-step 3 --pause-ms 1000 --exit-rank 3 --exit-step 5 --exit-code 0 --exit-how exit --hold-ms 60000
wait_for 30 has_report exit0 || fail "exit0: no live report: $(cat "$WORK/exit0.err")"
r=$(report_of exit0)
[ "$(lead "$r")" = "DEAD r3" ] || fail "exit0: the live collector says $(lead "$r"), want DEAD r3: $(json_get "$r" "d['verdicts'][0]['headline']")"
json_get "$r" "d['verdicts'][0]['headline']" | grep -q "exit code 0" || fail "exit0: the verdict does not say exit code 0"
node_a_quotes exit0 DEAD
stop_job
check_same exit0 "DEAD r3"
stop_serve

# ---- 5. a pipeline stage away before its send ----
start_serve pipeline
launch pipeline -- --pipeline --steps 10 --sleep-rank 2 --sleep-step 5 --sleep-ms 60000 --hold-ms 60000
wait_for 30 has_report pipeline || fail "pipeline: no live report: $(cat "$WORK/pipeline.err")"
wait_for 20 lead_is "$(report_of pipeline)" "NOT_JOINED r2" ||
    fail "pipeline: the live collector says $(lead "$(report_of pipeline)"), want NOT_JOINED r2"
# The verdict holds while the stage stays away: later analyses (the ranks' stacks, their States) do not undo it.
sleep_until=$(($(date +%s) + 3))
while [ "$(date +%s)" -lt "$sleep_until" ]; do
    lead_is "$(report_of pipeline)" "NOT_JOINED r2" ||
        fail "pipeline: the live collector went from NOT_JOINED r2 to $(lead "$(report_of pipeline)")"
done
node_a_quotes pipeline NOT_JOINED
stop_job
check_same pipeline "NOT_JOINED r2"
stop_serve

# ---- 6. the same through a relay per node ----
# start_relays NAME: one relay per node, both to the collector of NCCLWATCH_COLLECTOR; RELAY_A, RELAY_B their ports.
start_relays() {
    for n in a b; do
        "$NCW_COLLECTOR" relay --listen 127.0.0.1:0 --to "$NCCLWATCH_COLLECTOR" >"$WORK/$1.relay-$n.out" 2>"$WORK/$1.relay-$n.err" &
        RELAY_PIDS+=($!)
        wait_for 10 grep -q "relaying" "$WORK/$1.relay-$n.out" || fail "relay $n did not start: $(cat "$WORK/$1.relay-$n.err")"
        wait_for 10 grep -q "connected to the collector" "$WORK/$1.relay-$n.err" ||
            fail "relay $n did not reach the collector: $(cat "$WORK/$1.relay-$n.err")"
        export "RELAY_${n^^}=127.0.0.1:$(sed -n 's/.*relaying 127.0.0.1:\([0-9]*\) .*/\1/p' "$WORK/$1.relay-$n.out")"
    done
}
start_serve relay_skip
start_relays relay_skip
run_skip relay_skip
stop_relays
stop_serve

start_serve relay_dies
start_relays relay_dies
run_dies relay_dies
stop_relays
stop_serve

# ---- 7. an MoE all-to-all whose rank 3 sends rank 0 (the other node) twice the rows it expects ----
start_serve a2a
launch a2a -- --steps 10 --a2a --a2a-stale-rank 3 --a2a-stale-step 5 --hold-ms 60000
wait_for 30 has_report a2a || fail "a2a: no live report: $(cat "$WORK/a2a.err")"
wait_for 20 lead_is "$(report_of a2a)" "MISMATCH r3" || fail "a2a: the live collector says $(lead "$(report_of a2a)")"
json_get "$(report_of a2a)" "d['verdicts'][0]['headline']" | grep -q "sends .* to rank 0 in Send #6 .*, which expects .* from it in its Recv #6: the all_to_all split sizes disagree" ||
    fail "a2a: the live headline: $(json_get "$(report_of a2a)" "d['verdicts'][0]['headline']")"
stop_job
check_same a2a "MISMATCH r3"
stop_serve

# ---- 8. ranks 0 and 1 both send first, each blocked in its send ----
start_serve cycle
launch cycle -- --steps 10 --swap-pair --swap-deadlock-step 5 --hold-ms 60000
wait_for 30 has_report cycle || fail "cycle: no live report: $(cat "$WORK/cycle.err")"
wait_for 20 lead_is "$(report_of cycle)" "DEADLOCK r0,1" || fail "cycle: the live collector says $(lead "$(report_of cycle)")"
stop_job
check_same cycle "DEADLOCK r0,1"
stop_serve

# Shared by the end-to-end tests. Meson passes the paths of what they run:
#   NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK
set -u
WORK=$(mktemp -d /tmp/ncw-e2e-XXXXXX)
export NCCLWATCH_DIR="$WORK/dumps"
export FAKE_NCCL_TIMEOUT_SEC=${FAKE_NCCL_TIMEOUT_SEC:-60}
unset NCCLWATCH_JOB_ID NCCLWATCH_ENABLE NCCLWATCH_ACTION
LAUNCH_PID=""
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# At the end of every test, every JSON document it made (the shim's reports and dumps, the live reports, analyze
# --json and dump --json outputs: anything under $WORK that names an "ncclwatch.*" schema) must follow its schema in
# docs/schemas/ (test/schema/validate_json.py): a test that passed fails here if one does not. (The test's own exit
# status is kept otherwise: traps that call cleanup after other commands leave no way to read it here.)
cleanup() {
    # The launcher leads its own process group: the ranks go with it.
    if [ -n "$LAUNCH_PID" ]; then kill -KILL -- "-$LAUNCH_PID" 2>/dev/null; wait "$LAUNCH_PID" 2>/dev/null; fi
    if [ -d "$WORK" ] && ! /usr/bin/python3 "$E2E_DIR/../schema/validate_json.py" --scan "$WORK"; then
        echo "FAIL: a JSON document this test made does not follow its schema (docs/schemas/; errors above)" >&2
        rm -rf "$WORK"
        exit 1
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# The lead verdict of a shim report's first stall event, or one key of it: stall_lead FILE [KEY].
stall_lead() {
    local expr="[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]"
    [ -n "${2:-}" ] && expr="$expr['$2']"
    json_get "$1" "$expr"
}

# Every rank of the job reported a stall, each report's first one led by KIND naming CULPRITS (a JSON list of comm
# ranks): every_stall_led_by NRANKS KIND CULPRITS.
every_stall_led_by() {
    wait_for 30 has_files '*.report.json' "$1" || fail "not every rank reported the stall"
    local r
    for r in "$(job_dir)"/rank*-*.report.json; do
        [ "$(stall_lead "$r" kind)" = "$2" ] || fail "$r: lead $(stall_lead "$r"), want $2"
        [ "$(stall_lead "$r" culprits)" = "$3" ] || fail "$r: culprits $(stall_lead "$r" culprits), want $3"
    done
}

# The shims' first line and the live collector's first verdict (NCCLWATCH_COLLECTOR=auto: its report in the job
# folder) both the line WANT (a grep pattern from the kind on): shim_and_live_lead_with WANT
shim_and_live_lead_with() {
    grep -m1 "^\[ncclwatch r" "$WORK/launch.err" | grep -q "\] $1" ||
        fail "the stderr report's first line: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"
    wait_for 30 test -s "$(job_dir)/live-report.txt" || fail "no live report in the job folder"
    sed -n 2p "$(job_dir)/live-report.txt" | grep -q "^$1" ||
        fail "the live report leads with: $(sed -n 2p "$(job_dir)/live-report.txt")"
}

# A clean run of the same job prints nothing (without the collector in rank 0: a healthy job's end under it is issue
# 43's "lost the live collector"): quiet_clean_run NPROC [fake_rank args...]
quiet_clean_run() {
    stop_job
    rm -rf "$NCCLWATCH_DIR"
    NCCLWATCH_COLLECTOR= run_job "$@"
    [ "$JOB_RC" = 0 ] || fail "the clean job exited $JOB_RC: $(tail -3 "$WORK/launch.err")"
    if grep -q "^\[ncclwatch" "$WORK/launch.err"; then fail "a clean job printed: $(grep -m1 '^\[ncclwatch' "$WORK/launch.err")"; fi
}

# Checks that go on past a failure and are summed up at the end: check_fail WHY... for each, then
# checks_done "ok: ..." (prints it, or lists the failures and exits 1).
FAILS=()
check_fail() {
    FAILS+=("$*")
    echo "FAIL: $*" >&2
}
checks_done() {
    if [ ${#FAILS[@]} -gt 0 ]; then
        echo "FAILED ${#FAILS[@]} check(s):" >&2
        printf '  - %s\n' "${FAILS[@]}" >&2
        exit 1
    fi
    echo "$1"
}

# A live collector on loopback (serve --timeout 2 --dead-after 5, reports under $WORK/live) for the job's ranks to
# stream to: NCCLWATCH_COLLECTOR and a 50 ms digest period exported, killed at the test's end. live_txt: its report.
start_live_serve() {
    SERVE_PID=""
    trap '[ -n "$SERVE_PID" ] && kill -KILL "$SERVE_PID" 2>/dev/null; cleanup' EXIT
    mkdir -p "$WORK/live"
    "$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --timeout 2 --dead-after 5 --out "$WORK/live" >"$WORK/serve.out" \
        2>"$WORK/serve.err" &
    SERVE_PID=$!
    wait_for 10 grep -q "listening on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
    export NCCLWATCH_COLLECTOR="127.0.0.1:$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")"
    export NCCLWATCH_DIGEST_MS=50
}
# Rank 0's collector (NCCLWATCH_COLLECTOR=auto, debug level) has said where it listens, in $WORK/launch.err: the whole
# line, not its first words alone.
auto_listening() { grep -q "live collector listening on [^ ,]*, .*reports in" "$WORK/launch.err"; }
live_txt() { ls "$WORK"/live/*/live-report.txt 2>/dev/null | head -1; }
# report_of NAME: the live report (JSON) of the collector that serve_into NAME started, if it wrote one; has_report
# NAME: whether it did.
report_of() { ls "$WORK/$1"/*/live-report.json 2>/dev/null | head -1; }
has_report() { [ -n "$(report_of "$1")" ]; }

# A collector on loopback writing into $WORK/NAME, with /metrics on a port of its own and the test's own flags:
# serve_into NAME [--port P] [serve flags...] (P: 0, any free port, by default). Sets SERVE_PID, PORT and MPORT and
# exports NCCLWATCH_COLLECTOR; its output is in $WORK/NAME.out and .err. With SERVE_VMEM_KB set, serve runs under
# that `ulimit -v`: an attack test whose bound regresses then fails, not the machine.
serve_into() {
    local name=$1 port=0
    shift
    if [ "${1:-}" = --port ]; then
        port=$2
        shift 2
    fi
    mkdir -p "$WORK/$name"
    : >"$WORK/$name.out" && : >"$WORK/$name.err"  # as new_launch_logs: a NAME used again never shows the last run
    local wrap=()
    [ -n "${SERVE_VMEM_KB:-}" ] && wrap=(bash -c 'ulimit -v "$0" && exec "$@"' "$SERVE_VMEM_KB")
    "${wrap[@]}" "$NCW_COLLECTOR" serve --listen "127.0.0.1:$port" --metrics 127.0.0.1:0 --out "$WORK/$name" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    SERVE_PID=$!
    wait_for 10 grep -q "listening on" "$WORK/$name.out" || fail "serve did not start: $(cat "$WORK/$name.err")"
    PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.out")
    MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.out")
    export NCCLWATCH_COLLECTOR="127.0.0.1:$PORT"
}

# field FILE EXPR: EXPR of d, the JSON on the last line of FILE (what hostile_client.py prints).
field() { "$PY" -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval(sys.argv[2], {'d': d}))" "$@"; }

# A live collector a test started (its pid in SERVE_PID), and the job, each ended at once.
stop_serve() {
    [ -n "${SERVE_PID:-}" ] && kill -KILL "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    SERVE_PID=""
}
stop_job() {
    [ -n "$LAUNCH_PID" ] && kill -KILL -- "-$LAUNCH_PID" 2>/dev/null && wait "$LAUNCH_PID" 2>/dev/null
    LAUNCH_PID=""
}

# The body of GET /metrics from the collector whose metrics port is in MPORT ("" when it does not answer).
metrics() { "$PY" -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:'+sys.argv[1]+'/metrics', timeout=5).read().decode())" "$MPORT" 2>/dev/null; }

fail() {
    echo "FAIL: $*" >&2
    for f in "$WORK"/launch.out "$WORK"/launch.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -40 "$f" >&2; }; done
    exit 1
}

# The launcher's output files of a new job, emptied now: the job's own redirections run in a background shell, at a time
# of its own, and a wait on launch.err must not find the previous job's lines there before they are gone.
new_launch_logs() { : >"$WORK/launch.out" && : >"$WORK/launch.err"; }

# Starts a job in the background under the shim: launch_job NPROC [fake_rank args...]
launch_job() {
    local n=$1
    shift
    new_launch_logs
    LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc "$n" --timeout-sec 90 -- "$FAKE_RANK" "$@" \
        >"$WORK/launch.out" 2>"$WORK/launch.err" &
    LAUNCH_PID=$!
}

# Starts a job as launch_job does, each rank's stderr into a file of its own, $WORK/rank<R>.err (as torchrun's
# --redirects does; the launcher's own stays in launch.err): launch_job_own_stderr NPROC [fake_rank args...]
launch_job_own_stderr() {
    local n=$1
    shift
    cat >"$WORK/own_stderr.sh" <<'WRAP'
#!/bin/bash
exec "$@" 2>"$OWN_STDERR_DIR/rank$RANK.err"
WRAP
    chmod +x "$WORK/own_stderr.sh"
    new_launch_logs
    OWN_STDERR_DIR="$WORK" LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc "$n" --timeout-sec 90 -- \
        "$WORK/own_stderr.sh" "$FAKE_RANK" "$@" >"$WORK/launch.out" 2>"$WORK/launch.err" &
    LAUNCH_PID=$!
}

# The shim's lines in a stderr file ("[ncclwatch r3] ...", the short prefix): ncw_lines FILE
ncw_lines() { grep "^\[ncclwatch" "$1"; }

# Runs a job to its end: run_job NPROC [fake_rank args...]; sets JOB_RC.
run_job() {
    local n=$1
    shift
    LD_PRELOAD="$NCW_SHIM" "$FAKE_LAUNCH" --nproc "$n" --timeout-sec 90 -- "$FAKE_RANK" "$@" \
        >"$WORK/launch.out" 2>"$WORK/launch.err"
    JOB_RC=$?
}

# Waits for a condition, polling it: wait_for SECONDS COMMAND...
wait_for() {
    local limit=$1
    shift
    local deadline=$(($(date +%s%N) + limit * 1000000000))
    until "$@"; do
        [ "$(date +%s%N)" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

job_dir() { ls -d "$NCCLWATCH_DIR"/*/ 2>/dev/null | head -1; }
# A rank file has recorded at least N collectives on one of its communicators: issued_at_least FILE N.
issued_at_least() {
    "$NCW_COLLECTOR" dump --json "$1" 2>/dev/null | "$PY" -c "import json, sys
d = json.load(sys.stdin)
sys.exit(0 if max([c['coll_issued'] for c in d['comms']] or [0]) >= int(sys.argv[1]) else 1)" "$2"
}
count_files() { ls "$(job_dir)"/$1 2>/dev/null | wc -l; }
has_files() { [ "$(count_files "$1")" -ge "$2" ]; }
# Every rank's process has ended (reaped: a zombie still answers kill -0)
ranks_gone() {
    local f
    for f in "$(job_dir)"/*.ncw; do
        kill -0 "$(echo "$f" | sed -n 's/.*-\([0-9]*\)\(\.[0-9a-f]*\)\{0,1\}\.ncw$/\1/p')" 2>/dev/null && return 1
    done
    return 0
}

# jq is not assumed: python3 reads the JSON (the system one: a pyenv shim takes a second to start).
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
json_get() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {'d': d}))" "$@"; }

# Two "nodes" on one machine, as two hosts' local disks: $WORK/per_node.sh runs a rank with NCCLWATCH_DIR set to
# $NODES/node-a for ranks 0-1 and $NODES/node-b for 2-3 (NODES: $WORK/nodes, exported for the wrapper).
two_nodes() {
    NODES="$WORK/nodes"
    export NODES
    cat >"$WORK/per_node.sh" <<'WRAP'
#!/bin/bash
# Ranks 0-1 are node A, 2-3 node B.
node=$([ "$RANK" -lt 2 ] && echo a || echo b)
export NCCLWATCH_DIR="$NODES/node-$node"
# With a relay per node (RELAY_A, RELAY_B: HOST:PORT), each node's ranks reach the collector through theirs.
relay_var="RELAY_${node^^}"
[ -n "${!relay_var:-}" ] && export NCCLWATCH_COLLECTOR="${!relay_var}"
exec "$@"
WRAP
    chmod +x "$WORK/per_node.sh"
}

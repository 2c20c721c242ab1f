#!/bin/bash
# Attack test (issue 45, item 3): the ways round the pid proof of a collector without a token, on loopback. Every
# check states the right answer.
#
# 1. Through a relay. `serve` and a node's relay run as root; a 4-rank job of root's streams through the relay. Before
#    it starts, `nobody` says Hello through the relay as rank 1 of that job (with its own pid), and a root process as
#    rank 2 claiming pid 31337 (no such process holds its socket); each claims a collective stuck for two minutes.
#    RIGHT ANSWER: both refused: nobody's as a user the collector does not take, the Reject and the collector's log
#    naming the option that would take it (--allow-uid 65534); the false pid with what the relay found at its socket.
#    The real ranks all connect; no live report, no dump asked of a real rank.
# 2. In pid namespaces (root, or a user namespace of one's own). A process in a pid namespace of its own says its pid there (1): taken, and the
#    collector names the process it is here, whose life is the rank's. A process in a namespace nested in another
#    claims its pid in the namespace between (no pid it knows itself by): refused, naming the process that holds the
#    socket and its own pid.
# 3. A collector that runs as a service user (`nobody`): it may not read root's descriptors. Without --allow-user,
#    root's rank is refused, naming --allow-uid 0, and nobody's own is taken; with --allow-user root, a 2-rank job of
#    root's connects and is watched (taken on its sockets' user, said in the log).
# A part this machine does not allow (not root, no setpriv, `unshare -p` refused) says SKIP and why; with none left
# the test is skipped (exit 77).
#
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK. Bounded: ~60 s.
. "$(dirname "$0")/lib.sh"
HC="$(cd "$(dirname "$0")" && pwd)/hostile_client.py"
SERVE_PID=""
RELAY_PID=""
CLAIM_PIDS=()
NB=""
stop_relay() { [ -n "$RELAY_PID" ] && kill -KILL "$RELAY_PID" 2>/dev/null && wait "$RELAY_PID" 2>/dev/null; RELAY_PID=""; }
stop_claims() {
    for p in "${CLAIM_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    CLAIM_PIDS=()
}
trap 'stop_claims; stop_job; stop_relay; stop_serve; [ -n "$NB" ] && rm -rf "$NB"; cleanup' EXIT

export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30
export NCCLWATCH_LOG_LEVEL=debug  # each rank's connection and a dump request are said at debug level
senders() { grep -c "sending live digests to the collector at" "$WORK/launch.err"; }
n_sending() { [ "$(senders)" -ge "$1" ]; }
no_reports() {  # no_reports NAME DIR: no live report under DIR, no dump asked of a real rank
    local n d
    n=$(ls "$2"/*/live-report.txt 2>/dev/null | wc -l)
    [ "$n" = 0 ] || check_fail "$1: a healthy job got a live report: $(sed -n 2p "$2"/*/live-report.txt | head -1)"
    d=$(grep -c "the live collector asks for a dump" "$WORK/launch.err")
    [ "$d" = 0 ] || check_fail "$1: the collector asked real ranks for $d dump(s)"
    echo "$1: live reports $n, dump requests $d, ranks sending $(senders)"
}

# Running as another user: root, and setpriv.
AS_NOBODY=0
if [ "$(id -u)" = 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
    AS_NOBODY=1
    NB=$(mktemp -d /tmp/ncw-e2e-nobody-XXXXXX)
    chmod 0755 "$NB"
else
    echo "SKIP parts 1 and 3: running a process as nobody needs root and setpriv (uid $(id -u) here)"
fi
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# Pid namespaces: root, or a user namespace of one's own.
PIDNS=0
NEW_PIDNS=(unshare --pid --fork)
[ "$(id -u)" = 0 ] || NEW_PIDNS=(unshare --user --map-root-user --pid --fork)
if "${NEW_PIDNS[@]}" true 2>/dev/null; then
    PIDNS=1
else
    echo "SKIP part 2: a new pid namespace is not permitted here (${NEW_PIDNS[*]}: $("${NEW_PIDNS[@]}" true 2>&1 | head -1))"
fi
[ $AS_NOBODY = 1 ] || [ $PIDNS = 1 ] || { echo "SKIP: no part of this test can run here"; exit 77; }

# ---- 1. nobody, and a false pid, through a relay of the collector's user ----
if [ $AS_NOBODY = 1 ]; then
    serve_into relay --timeout 2 --dead-after 3
    "$NCW_COLLECTOR" relay --listen 127.0.0.1:0 --to "$NCCLWATCH_COLLECTOR" >"$WORK/relay.out" 2>"$WORK/relay.err" &
    RELAY_PID=$!
    wait_for 10 grep -q "relaying" "$WORK/relay.out" || fail "the relay did not start: $(cat "$WORK/relay.err")"
    wait_for 10 grep -q "connected to the collector" "$WORK/relay.err" || fail "the relay did not reach the collector"
    RPORT=$(sed -n 's/.*relaying 127.0.0.1:\([0-9]*\) .*/\1/p' "$WORK/relay.out")
    export NCCLWATCH_JOB_ID=ident-job
    as_nobody "$PY" "$HC" --max-seconds 15 claim --port "$RPORT" --job ident-job --rank 1 --pid 0 --duration 5 \
        >"$WORK/nobody.json" 2>"$WORK/nobody.err" &
    CLAIM_PIDS+=($!)
    "$PY" "$HC" --max-seconds 15 claim --port "$RPORT" --job ident-job --rank 2 --pid 31337 --duration 5 \
        >"$WORK/liar.json" 2>"$WORK/liar.err" &
    CLAIM_PIDS+=($!)
    answered() { grep -q "job ident-job rank 1" "$WORK/relay.err" || metrics | grep -q 'job_id="ident-job"'; }
    wait_for 5 answered || true
    NCCLWATCH_COLLECTOR="127.0.0.1:$RPORT" launch_job 4 --steps 5 --count 1024 --hold-ms 20000
    for p in "${CLAIM_PIDS[@]}"; do wait "$p"; done
    CLAIM_PIDS=()
    echo "nobody through the relay: $(cat "$WORK/nobody.json")"
    echo "pid 31337 through the relay: $(cat "$WORK/liar.json")"
    [ "$(field "$WORK/nobody.json" "d['uid']")" = 65534 ] || check_fail "the claim did not run as nobody: $(cat "$WORK/nobody.err")"
    [ "$(field "$WORK/nobody.json" "d['acked']")" = False ] || check_fail "the collector took nobody's Hello as rank 1 through the relay"
    grep -q "identity refused: runs as uid 65534.*--allow-uid 65534" "$WORK/nobody.json" ||
        check_fail "no Reject naming nobody's uid and the option that would take it"
    grep -q "refused Hello from .*relayed.*job ident-job rank 1.*start the collector with --allow-uid 65534" "$WORK/relay.err" ||
        check_fail "no collector log line naming the option that takes nobody's ranks: $(grep -i refused "$WORK/relay.err" | head -2)"
    [ "$(field "$WORK/liar.json" "d['acked']")" = False ] || check_fail "the collector took pid 31337's Hello as rank 2 through the relay"
    grep -q "identity refused: at its relay: claims pid 31337, but its socket is held by pid [0-9]" "$WORK/liar.json" ||
        check_fail "no Reject saying what the relay found at the false pid's socket"
    wait_for 15 n_sending 4 || check_fail "only $(senders) of 4 real ranks send live digests (one kept out?)"
    sleep 1  # the ranks' digests flow a second: nothing to report in a healthy job
    no_reports relay "$WORK/relay"
    stop_job
    stop_relay
    stop_serve
    unset NCCLWATCH_JOB_ID
    rm -rf "$NCCLWATCH_DIR"
fi

# ---- 2. pid namespaces: a pid said in one's own namespace is a label; a pid between is none ----
if [ $PIDNS = 1 ]; then
    serve_into ns --timeout 2 --dead-after 3
    "${NEW_PIDNS[@]}" "$PY" "$HC" --max-seconds 15 claim --port "$PORT" --job ns-job --rank 0 --world 2 --pid 0 \
        --duration 2 >"$WORK/ns_own.json" 2>"$WORK/ns_own.err"
    echo "own pid in its own namespace: $(cat "$WORK/ns_own.json")"
    here=$(field "$WORK/ns_own.json" "d['nspid'][0]")
    [ "$(field "$WORK/ns_own.json" "d['pid']")" = 1 ] || check_fail "the claimant is not pid 1 in a namespace of its own"
    [ "$(field "$WORK/ns_own.json" "d['acked']")" = True ] || check_fail "a rank in a pid namespace of its own saying its pid there was refused"
    grep -q "job ns-job rank 0 from .*: pid 1 as it says (its own pid namespace's), pid $here here: that process's life is the rank's" "$WORK/ns.err" ||
        check_fail "the collector does not name the process the rank is here (pid $here): $(tail -2 "$WORK/ns.err")"

    rm -f "$WORK/between.pid"
    "${NEW_PIDNS[@]}" unshare --pid --fork "$PY" "$HC" --max-seconds 15 claim --port "$PORT" --job ns-job --rank 1 \
        --world 2 --pid-from "$WORK/between.pid" --duration 2 >"$WORK/ns_between.json" 2>"$WORK/ns_between.err" &
    CLAIM_PIDS+=($!)
    # The claimant's pid in the namespace between, read here: its NSpid line has three entries.
    between() {
        local p
        for p in $(pgrep -f "between.pid"); do
            set -- $(sed -n 's/^NSpid:\s*//p' "/proc/$p/status" 2>/dev/null)
            [ $# = 3 ] && { echo "$1 $2" >"$WORK/between.ids"; echo "$2" >"$WORK/between.pid"; return 0; }
        done
        return 1
    }
    wait_for 10 between || check_fail "the nested claimant never started: $(cat "$WORK/ns_between.err")"
    wait "${CLAIM_PIDS[@]}"
    CLAIM_PIDS=()
    read -r outer mid <"$WORK/between.ids"
    echo "pid $mid of the namespace between (process $outer here): $(cat "$WORK/ns_between.json")"
    [ "$(field "$WORK/ns_between.json" "d['acked']")" = False ] ||
        check_fail "a claim of the pid between two namespaces ($mid) was taken"
    grep -q "identity refused: claims pid $mid, but its socket is held by pid $outer (uid $(id -u), pid 1 in its own pid namespace)" "$WORK/ns_between.json" ||
        check_fail "no Reject naming the process that holds the socket and its own pid"
    stop_serve
fi

# ---- 3. a collector that runs as a service user ----
if [ $AS_NOBODY = 1 ]; then
    # serve_nobody NAME [serve flags...]: as serve_into, as nobody, its reports in $NB/NAME.
    serve_nobody() {
        local name=$1
        shift
        mkdir -p "$NB/$name"
        chown 65534:65534 "$NB/$name"
        : >"$WORK/$name.out" && : >"$WORK/$name.err"
        as_nobody "$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --out "$NB/$name" --timeout 2 \
            --dead-after 3 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
        SERVE_PID=$!
        wait_for 10 grep -q "listening on" "$WORK/$name.out" || { check_fail "$name: serve did not start: $(cat "$WORK/$name.err")"; return 1; }
        PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.out")
        MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/$name.out")
        export NCCLWATCH_COLLECTOR="127.0.0.1:$PORT"
    }
    if serve_nobody service; then
        "$PY" "$HC" --max-seconds 10 claim --port "$PORT" --job svc-job --rank 0 --pid 0 --duration 1 >"$WORK/svc_root.json" 2>&1
        as_nobody "$PY" "$HC" --max-seconds 10 claim --port "$PORT" --job svc-job --rank 1 --pid 0 --duration 1 \
            >"$WORK/svc_own.json" 2>&1
        echo "root's rank at a collector of nobody's: $(cat "$WORK/svc_root.json")"
        [ "$(field "$WORK/svc_root.json" "d['acked']")" = False ] || check_fail "a collector of nobody's took root's rank unasked"
        grep -q "identity refused: runs as uid 0, neither the collector's user (uid 65534).*--allow-uid 0" "$WORK/svc_root.json" ||
            check_fail "the Reject does not name the option that takes root's ranks"
        grep -q "refused Hello from .*job svc-job rank 0.*start the collector with --allow-uid 0" "$WORK/service.err" ||
            check_fail "no collector log line naming the option: $(grep -i refused "$WORK/service.err" | head -2)"
        [ "$(field "$WORK/svc_own.json" "d['acked']")" = True ] || check_fail "a collector of nobody's refused nobody's own rank: $(cat "$WORK/svc_own.json")"
        stop_serve
    fi
    if serve_nobody allowed --allow-user root; then
        export NCCLWATCH_JOB_ID=svc-job
        launch_job 2 --steps 5 --count 1024 --hold-ms 8000
        two_connected() {
            [ "$(metrics | grep -c '^ncclwatch_connected{.*} 1$')" = 2 ] &&
                metrics | grep -q '^ncclwatch_coll_completed_total{.*} 5$'
        }
        wait_for 15 two_connected || check_fail "root's 2 ranks did not connect to a collector of nobody's with --allow-user root: $(grep -i refused "$WORK/allowed.err" | head -2)"
        grep -q "on its socket's user, uid 0, alone: this collector (uid 65534) may not read that user's descriptors" "$WORK/allowed.err" ||
            check_fail "the collector does not say it took root's ranks on their sockets' user alone"
        no_reports allowed "$NB/allowed"
        stop_job
        stop_serve
        unset NCCLWATCH_JOB_ID
    fi
fi

ran=()
[ $AS_NOBODY = 1 ] && ran+=("a relay's ranks are proven (nobody and a false pid refused)")
[ $PIDNS = 1 ] && ran+=("a pid namespace's pid is a label, one between none")
[ $AS_NOBODY = 1 ] && ran+=("a collector of a service user takes the users it is told to")
checks_done "ok: $(IFS=';'; echo "${ran[*]}" | sed 's/;/; /g')"

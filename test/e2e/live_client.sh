#!/bin/bash
# The shim's live digest client against a stand-in collector (live_listener.py): every rank says Hello and sends
# Digests; a DumpRequest makes that rank write its dump; the listener killed and restarted on the same port gets every
# rank back; a clean exit says Bye. With nothing listening at all, the job runs as it does without the client.
. "$(dirname "$0")/lib.sh"
LISTENER="$(dirname "$0")/live_listener.py"
LISTENER_PID=""
stop_listener() { [ -n "$LISTENER_PID" ] && kill -KILL "$LISTENER_PID" 2>/dev/null && wait "$LISTENER_PID" 2>/dev/null; LISTENER_PID=""; }
trap 'stop_listener; cleanup' EXIT

# start_listener PORT STATE [--dump-rank R]: sets PORT to the bound port.
start_listener() {
    local port=$1 state=$2
    shift 2
    rm -f "$WORK/port"
    "$PY" "$LISTENER" --port "$port" --port-file "$WORK/port" --state "$state" "$@" 2>>"$WORK/listener.err" &
    LISTENER_PID=$!
    wait_for 10 test -s "$WORK/port" || fail "the listener did not start: $(cat "$WORK/listener.err")"
    PORT=$(cat "$WORK/port")
}

# every_rank STATE N FIELD MIN: ranks 0..N-1 each counted at least MIN frames of FIELD.
every_rank() {
    "$PY" -c "
import json, sys
try: d = json.load(open(sys.argv[1]))['ranks']
except Exception: sys.exit(1)
n, field, least = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sys.exit(0 if all(d.get(str(r), {}).get(field, 0) >= least for r in range(n)) else 1)" "$@"
}

# ---- 1. Nothing listening: the job's runtime does not change ----
run_job 4 --steps 200 --count 4096
[ "$JOB_RC" = 0 ] || fail "baseline job exit $JOB_RC"
t0=$(date +%s%N)
run_job 4 --steps 200 --count 4096
base_ns=$(($(date +%s%N) - t0))
# A port nobody listens on (the listener's, before it exists, is as good as any: bind one and close it).
DEAD_PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
t0=$(date +%s%N)
NCCLWATCH_COLLECTOR=127.0.0.1:$DEAD_PORT run_job 4 --steps 200 --count 4096
absent_ns=$(($(date +%s%N) - t0))
[ "$JOB_RC" = 0 ] || fail "with no collector listening, the job exited $JOB_RC"
grep -q "cannot reach the live collector" "$WORK/launch.err" || fail "no warning about the unreachable collector"
[ "$(grep -c "cannot reach the live collector" "$WORK/launch.err")" -le 4 ] || fail "the warning repeats per retry"
# Same work, same time, within scheduling noise (1 s on a loaded 2-core CI machine).
[ "$absent_ns" -le $((base_ns + 1000000000)) ] ||
    fail "with no collector the job took $((absent_ns / 1000000)) ms, without the client $((base_ns / 1000000)) ms"
echo "no collector: $((absent_ns / 1000000)) ms vs $((base_ns / 1000000)) ms without the client"

# ---- 2. Hello, Digests, a DumpRequest, a collector restart, Bye ----
rm -rf "$NCCLWATCH_DIR"
start_listener 0 "$WORK/state1.json" --dump-rank 1
export NCCLWATCH_COLLECTOR=127.0.0.1:$PORT NCCLWATCH_DIGEST_MS=50
# A dump request is said at debug level (the node's verdict is said once, by its reporter): shown here.
export NCCLWATCH_LOG_LEVEL=debug
# Steps spaced out (rank 3 sleeps before each one... simply a long hold) keep the job alive through the restart.
launch_job 4 --steps 50 --count 4096 --hold-ms 15000

wait_for 30 every_rank "$WORK/state1.json" 4 hello 1 || fail "not every rank said Hello: $(cat "$WORK/state1.json")"
wait_for 30 every_rank "$WORK/state1.json" 4 digest 1 || fail "not every rank sent a Digest: $(cat "$WORK/state1.json")"
wait_for 30 has_files 'rank1-*.dump.json' 1 || fail "rank 1 wrote no dump after the DumpRequest"
[ "$(count_files '*.dump.json')" = 1 ] || fail "ranks other than 1 wrote dumps"
grep -q "live collector asks for a dump: test: dump please" "$WORK/launch.err" || fail "rank 1 did not log the request"
# Nothing changes during the hold: keep-alives flow instead (one a second).
wait_for 10 every_rank "$WORK/state1.json" 4 keepalive 2 || fail "no keep-alives: $(cat "$WORK/state1.json")"

stop_listener
start_listener "$PORT" "$WORK/state2.json"
wait_for 30 every_rank "$WORK/state2.json" 4 hello 1 || fail "ranks did not reconnect: $(cat "$WORK/state2.json")"
wait_for 10 every_rank "$WORK/state2.json" 4 digest 1 || fail "no digest after reconnecting"
grep -q "reconnected to the live collector" "$WORK/launch.err" || fail "no reconnect message"
unset NCCLWATCH_LOG_LEVEL

wait "$LAUNCH_PID"
rc=$?
LAUNCH_PID=""
[ $rc = 0 ] || fail "the job exited $rc"
wait_for 10 every_rank "$WORK/state2.json" 4 bye 1 || fail "not every rank said Bye: $(cat "$WORK/state2.json")"
stop_listener

# ---- 3. A Reject is final: logged once, no reconnect ----
start_listener 0 "$WORK/state3.json" --reject "test: bad token"
export NCCLWATCH_COLLECTOR=127.0.0.1:$PORT
run_job 2 --steps 20 --count 4096 --hold-ms 3000
[ "$JOB_RC" = 0 ] || fail "a rejected job exited $JOB_RC"
[ "$(grep -c "refused this rank: test: bad token" "$WORK/launch.err")" = 2 ] || fail "each rank should log the Reject once"
every_rank "$WORK/state3.json" 2 hello 1 || fail "no Hello before the Reject"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1]))['ranks']; sys.exit(0 if all(v['hello']==1 for v in d.values()) else 1)" \
    "$WORK/state3.json" || fail "a rejected rank reconnected: $(cat "$WORK/state3.json")"
stop_listener

# ---- 4. A rank that ends before its Hello is answered still says how it ended ----
# The collector answers 50 ms late and the job ends within a few milliseconds: each rank's end waits for the answer
# (within its bounded end window) and then sends its Digest and State, instead of a socket that closes with nothing.
start_listener 0 "$WORK/state4.json" --ack-delay-ms 50
export NCCLWATCH_COLLECTOR=127.0.0.1:$PORT NCCLWATCH_DIGEST_MS=1000
run_job 2 --steps 2 --count 16
[ "$JOB_RC" = 0 ] || fail "the short job exited $JOB_RC"
wait_for 10 every_rank "$WORK/state4.json" 2 digest 1 ||
    fail "a rank that ended before the HelloAck sent no Digest: $(cat "$WORK/state4.json")"
echo "ok: Hello, Digests, DumpRequest, reconnect and Bye from every rank; a Reject is final; no collector costs nothing; a rank ending before the HelloAck still reports"

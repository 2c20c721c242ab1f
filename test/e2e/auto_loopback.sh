#!/bin/bash
# Attack test (issue 15): the collector that NCCLWATCH_COLLECTOR=auto embeds in rank 0 obeys `serve`'s rule. Without
# NCCLWATCH_TOKEN it listens on loopback only, even when MASTER_ADDR is an address every host can reach (it used to
# listen there, and anyone who could reach it could speak for any rank); the ranks of rank 0's host still reach it, by
# loopback, and the hang is still reported live. With a token it listens on MASTER_ADDR.
# Needs a non-loopback address on this host (skipped without one). Bounded: ~30 s.
. "$(dirname "$0")/lib.sh"
trap cleanup EXIT
IP=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
[ -n "$IP" ] || IP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9.]+$' | grep -v '^127\.' | head -1)
[ -n "$IP" ] || { echo "SKIP: no non-loopback IPv4 address here"; exit 77; }
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
export NCCLWATCH_LOG_LEVEL=debug  # where the collector listens and the ranks connect: said at debug level
unset NCCLWATCH_TOKEN

launch_master() {
    new_launch_logs
    LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 --env "MASTER_ADDR=$IP" -- "$FAKE_RANK" \
        --steps 10 --count 4096 --skip-rank 2 --skip-step 5 --hold-ms 60000 >"$WORK/launch.out" 2>"$WORK/launch.err" &
    LAUNCH_PID=$!
}
listen_addr() { sed -n 's/.*live collector listening on \([^ ,]*\).*/\1/p' "$WORK/launch.err" | head -1; }
can_connect() { timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# Without a token.
launch_master
wait_for 30 auto_listening || fail "rank 0 started no collector"
addr=$(listen_addr)
port=${addr##*:}
echo "no token, MASTER_ADDR=$IP: $(grep -m1 "live collector listening on" "$WORK/launch.err" | sed 's/.*: live/live/')"
[ "$addr" = "127.0.0.1:$port" ] || fail "without a token the collector listens on $addr, not on 127.0.0.1:$port"
! can_connect "$IP" "$port" || fail "without a token, $IP:$port (MASTER_ADDR) accepts a connection"
can_connect 127.0.0.1 "$port" || fail "127.0.0.1:$port accepts no connection"
grep -q "loopback only" "$WORK/launch.err" || fail "the log does not say that the collector is on loopback only"
# Nothing here is secret: a "<redacted>" would be redaction eating the log's own words.
! grep -q "<redacted>" "$WORK/launch.err" || fail "the log redacts words that are no secret: $(grep -m1 "<redacted>" "$WORK/launch.err")"
wait_for 30 test -s "$(job_dir)/live-report.txt" || fail "no live report in the job folder (did the ranks connect?)"
grep -q "rank 2" "$(job_dir)/live-report.txt" || fail "the live report does not name rank 2"
echo "  $IP:$port refused, 127.0.0.1:$port open, live report names rank 2"
kill -KILL -- "-$LAUNCH_PID" 2>/dev/null
wait "$LAUNCH_PID" 2>/dev/null
rm -rf "$NCCLWATCH_DIR"

# With a token: MASTER_ADDR, so that the ranks of other hosts can reach it.
export NCCLWATCH_TOKEN=auto-loopback-test-token
launch_master
wait_for 30 auto_listening || fail "rank 0 started no collector (token)"
addr=$(listen_addr)
[ "$addr" = "$IP:${addr##*:}" ] || fail "with a token the collector listens on $addr, not on MASTER_ADDR $IP"
wait_for 20 grep -q "sending live digests to the collector at $IP:" "$WORK/launch.err" ||
    fail "with a token no rank connected to $IP"
echo "token: listening on $addr, ranks connected there"
echo "ok: without a token the auto collector is on loopback only; with one, on MASTER_ADDR"

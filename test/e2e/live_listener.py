"""A tiny stand-in for the live collector (include/ncclwatch/wire.h), for test/e2e/live_client.sh.

Accepts connections, splits the stream into frames by their 16-byte headers, answers each Hello with a HelloAck,
counts frames per global rank (the rank comes from the Hello), and can send one DumpRequest to one rank once that
rank has sent a Digest. Writes its counts as JSON to --state (atomically) whenever they change.

usage: live_listener.py --port N (0 = any) --port-file F --state F [--dump-rank R] [--reject REASON] [--ack-delay-ms MS]
(--reject answers every Hello with a Reject instead; --ack-delay-ms answers it that much later, as a loaded collector
would.)
"""
import argparse
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

MAGIC = 0x4C57434E
HEADER = struct.Struct("<IHHHHI")  # magic, major, minor, type, flags, length
NAMES = {1: "hello", 2: "digest", 3: "keepalive", 4: "bye"}


def frame(ftype, payload=b""):
    return HEADER.pack(MAGIC, 1, 0, ftype, 0, len(payload)) + payload


def hello_rank(payload):
    # token (u32 length + bytes), then the header block (u32 length + fields): major, minor (u16), six u32, five u64,
    # pid (i64), then global_rank (i32).
    (tlen,) = struct.unpack_from("<I", payload, 0)
    block = 4 + tlen + 4
    return struct.unpack_from("<i", payload, block + 4 + 24 + 40 + 8)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--dump-rank", type=int, default=-1)
    ap.add_argument("--reject", default=None)
    ap.add_argument("--ack-delay-ms", type=int, default=0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", args.port))
    lsock.listen(128)
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, None)

    ranks = {}  # rank -> counts
    conns = {}  # socket -> {"buf": bytes, "rank": int or None}
    state = {"ranks": ranks, "bad": 0, "dump_sent": False}

    def publish():
        tmp = args.state + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, args.state)

    publish()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(lsock.getsockname()[1]))
    os.replace(tmp, args.port_file)

    acks = []  # (due, socket): HelloAcks held back by --ack-delay-ms

    def send_due_acks():
        now = time.monotonic()
        for due, c in [a for a in acks if a[0] <= now]:
            acks.remove((due, c))
            if c in conns:
                try:
                    c.sendall(frame(16))
                except OSError:
                    pass

    while True:
        send_due_acks()
        timeout = 1.0 if not acks else max(0.0, min(a[0] for a in acks) - time.monotonic())
        for key, _ in sel.select(timeout=timeout):
            if key.data is None:
                try:
                    c, _ = lsock.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                conns[c] = {"buf": b"", "rank": None}
                sel.register(c, selectors.EVENT_READ, "conn")
                continue
            c = key.fileobj
            info = conns[c]
            try:
                data = c.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(c)
                c.close()
                del conns[c]
                continue
            info["buf"] += data
            changed = False
            while len(info["buf"]) >= HEADER.size:
                magic, major, _minor, ftype, _flags, length = HEADER.unpack_from(info["buf"])
                if magic != MAGIC or major != 1:
                    state["bad"] += 1
                    info["buf"] = b""
                    break
                if len(info["buf"]) < HEADER.size + length:
                    break
                payload = info["buf"][HEADER.size:HEADER.size + length]
                info["buf"] = info["buf"][HEADER.size + length:]
                if ftype == 1:
                    info["rank"] = hello_rank(payload)
                    if args.reject is None and args.ack_delay_ms > 0:
                        acks.append((time.monotonic() + args.ack_delay_ms / 1000.0, c))
                    elif args.reject is None:
                        c.sendall(frame(16))
                    else:
                        reason = args.reject.encode()
                        c.sendall(frame(17, struct.pack("<I", len(reason)) + reason))
                r = info["rank"]
                if r is None:
                    state["bad"] += 1
                    continue
                counts = ranks.setdefault(str(r), {n: 0 for n in NAMES.values()})
                counts[NAMES.get(ftype, "other")] = counts.get(NAMES.get(ftype, "other"), 0) + 1
                changed = True
                if ftype == 2 and r == args.dump_rank and not state["dump_sent"]:
                    reason = b"test: dump please"
                    c.sendall(frame(18, struct.pack("<QI", 1, len(reason)) + reason))
                    state["dump_sent"] = True
            if changed:
                publish()


if __name__ == "__main__":
    main()

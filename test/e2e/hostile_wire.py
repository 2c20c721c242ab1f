"""The wire protocol and the sockets of test/e2e/hostile_client.py: frames (include/ncclwatch/wire.h), payloads (lib/read/
wire.cpp: u32-length strings and blocks), connecting, collecting replies, and reading /metrics. 127.0.0.1 only."""
import hashlib
import hmac
import re
import resource
import selectors
import socket
import struct
import time

MAGIC = 0x4C57434E
HEADER = struct.Struct("<IHHHHI")  # magic, major, minor, type, flags, length
T_HELLO, T_DIGEST, T_KEEPALIVE, T_BYE, T_PROOF = 1, 2, 3, 4, 5
T_ACK, T_REJECT, T_DUMP, T_CHALLENGE = 16, 17, 18, 19
WIRE_MINOR = 2  # 1.2: the token is proven (an HMAC over the collector's nonce and the Hello), never sent
PROOF_LABEL = b"ncclwatch live 1.2 token proof\0"  # lib/live/live_auth.h, with its NUL
MAX_PAYLOAD = 1 << 20
HOST = "127.0.0.1"
FAKE_MAJOR, FAKE_MINOR = 1, 2  # disk format the shim writes


# ---------------------------------------------------------------- encoding

def frame(ftype, payload=b""):
    return HEADER.pack(MAGIC, 1, WIRE_MINOR, ftype, 0, len(payload)) + payload


def s(v):
    if isinstance(v, str):
        v = v.encode()
    return struct.pack("<I", len(v)) + v


def block(body):
    return struct.pack("<I", len(body)) + body


def hello(job, rank, pid, host, world, token=b"", local_rank=0, local_world=1, boot=0, file=b""):
    """A 1.2 Hello: `token` is not in it (answer the Challenge with proof()); empty token field."""
    now = time.monotonic_ns()
    h = struct.pack("<HH", FAKE_MAJOR, FAKE_MINOR)
    h += struct.pack("<6I", 4096, 1024, 64, 64, 16384, 16)  # header, slot, max_comms, record, ring, bt depth
    h += struct.pack("<5Q", 4096, 4096 + 64 * 1024, 0, 1 << 20, 1 << 20)  # offsets, file sizes
    h += struct.pack("<q", pid)
    h += struct.pack("<4i", rank, local_rank, world, local_world)
    h += s(host) + s(job)
    h += struct.pack("<QQQ", now, time.time_ns(), boot)  # start mono, start real, boot id hash
    h += struct.pack("<ii", 22809, 12040)  # nccl, cuda driver
    h += struct.pack("<Q", now)  # heartbeat
    h += struct.pack("<II", 1, 1)  # process state Running, num comms
    h += struct.pack("<4Q", 1, 0, 0, 0)  # write ticket, dump request, dumps, reports
    h += struct.pack("<IiQ", 0, 0, 0)  # 1.5: end kind, end status, end time (still running)
    h += struct.pack("<I", 0)  # env count
    return frame(T_HELLO, s(b"") + block(h) + s(file))


def proof(token, challenge_payload, hello_frame):
    """The answer to a Challenge: HMAC-SHA256(token, label || nonce || the Hello's payload); empty without a token."""
    if not token:
        return frame(T_PROOF, s(b""))
    (n,) = struct.unpack_from("<I", challenge_payload)
    nonce = challenge_payload[4:4 + n]
    mac = hmac.new(token, PROOF_LABEL + nonce + hello_frame[HEADER.size:], hashlib.sha256).digest()
    return frame(T_PROOF, s(mac))


def sig(seq, count=1024, t_issue=0, op=1, dtype=7):
    return block(struct.pack("<QQQBBBiiIQ", seq, count, t_issue, op, dtype, 0, 0, -1, 0, 0))


def comm(comm_id, rank, nranks, issued, completed, t_last_issue=0, t_last_progress=0, stall_since=0, state=2,
         stall_flags=0, recent=(), pci=None):
    """One comm block; pci="" leaves the PCI bus id out (4,096 blocks then fit one frame of 1 MiB)."""
    now = time.monotonic_ns()
    b = struct.pack("<III", 0, state, stall_flags)
    b += struct.pack("<4i", rank, nranks, rank, 1)  # rank, nranks, cuda dev, blocking
    b += struct.pack("<QQii", comm_id, 0, -1, -1)
    b += struct.pack("<Q", 0x7f0000000000 + comm_id % 4096)  # comm ptr
    b += s("0000:%02x:00.0" % (rank % 256) if pci is None else pci) + s("")
    b += struct.pack("<QQ", now - 10 ** 9 * 120, now - 10 ** 9 * 119)  # init start, done
    b += struct.pack("<4Q", issued, issued, completed, completed)  # issued, returned, reached, completed
    b += struct.pack("<QQ", issued, completed)  # ops
    b += struct.pack("<QQ", t_last_issue or now, t_last_progress or now)
    b += struct.pack("<QQiI", 0, 0, 0, 0)  # p2p, async error, gpu tracking
    b += struct.pack("<QQ", stall_since, 0)
    # Format 1.4: gpu source, exact, proven unreached / uncompleted, clock uncertainty, completion-gap baseline.
    b += struct.pack("<IIQQQQ", 0, 0, 0, 0, 0, 0)
    b += struct.pack("<QQiQ", 0, 0, 0, 0)  # 1.5: ops failed, first failed seq, its result, its time
    b += struct.pack("<I", len(recent)) + b"".join(recent)
    return block(b)


MAX_COMMS = 64  # comm blocks before the 1.3 extension (wire.h kMaxComms); up to 4,032 more after it


def digest(comms, state=1):
    body = struct.pack("<QII", time.monotonic_ns(), state, min(len(comms), MAX_COMMS)) + b"".join(comms[:MAX_COMMS])
    if len(comms) > MAX_COMMS:  # 1.3: the comms past the first 64, with a count of their own
        body += struct.pack("<I", len(comms) - MAX_COMMS) + b"".join(comms[MAX_COMMS:])
    return frame(T_DIGEST, body)


class Frames:
    """Splits what the collector sends into frames."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= HEADER.size:
            magic, _maj, _min, t, fl, n = HEADER.unpack_from(self.buf)
            if magic != MAGIC or len(self.buf) < HEADER.size + n:
                break
            p = Payload(self.buf[HEADER.size:HEADER.size + n])
            p.flags = fl
            out.append((t, p))
            self.buf = self.buf[HEADER.size + n:]
        return out


class Payload(bytes):
    """A frame's payload, with its header's flags."""
    flags = 0


def reject_retry(payload):
    """1.2: the Reject's header says "refused for now" (a real shim reconnects with backoff)."""
    return bool(getattr(payload, "flags", 0) & 1)


def reject_reason(payload):
    try:
        (n,) = struct.unpack_from("<I", payload)
        return payload[4:4 + n].decode(errors="replace")
    except struct.error:
        return "?"


def count_reject(counts, payload):
    """Counts a Reject frame into `counts` (its reason -> how many)."""
    r = reject_reason(payload)
    counts[r] = counts.get(r, 0) + 1


# ---------------------------------------------------------------- helpers

def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect(port, timeout=5.0):
    c = socket.create_connection((HOST, port), timeout=timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def collect_replies(socks, wait_s, on_frames):
    """Reads from every socket until each closes or wait_s passes. on_frames(i, frames) per batch; returns the set of
    indexes the server closed (EOF / reset) and when (seconds from the start)."""
    sel = selectors.DefaultSelector()
    readers = {}
    for i, c in enumerate(socks):
        if c is None:
            continue
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ, i)
        readers[i] = Frames()
    closed = {}
    t0 = time.monotonic()
    deadline = t0 + wait_s
    while readers and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            i = key.data
            try:
                data = key.fileobj.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                closed[i] = time.monotonic() - t0
                sel.unregister(key.fileobj)
                del readers[i]
                continue
            fr = readers[i].feed(data)
            if fr:
                on_frames(i, fr)
    sel.close()
    return closed


def close_all(socks):
    for c in socks:
        if c is not None:
            try:
                c.close()
            except OSError:
                pass


def http_get(port, path="/metrics", timeout=10.0):
    c = socket.create_connection((HOST, port), timeout=timeout)
    try:
        c.sendall(("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" % path).encode())
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            d = c.recv(1 << 20)
            if not d:
                break
            chunks.append(d)
    finally:
        c.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    return status, body


LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_series(text, name):
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        lab, _, val = line[len(name) + 1:].rpartition("} ")
        d = dict(LABEL_RE.findall(lab))
        try:
            d["_value"] = float(val)
        except ValueError:
            continue
        out.append(d)
    return out

#!/usr/bin/env python3
"""Hostile clients for the live collector (`ncclwatch-collector serve`), for the test/e2e/hostile_*.sh,
metrics_*.sh and report_symlink.sh attack tests. Standard library only.

Every Hello says this process's own pid unless told otherwise: a collector without a token proves the pid a loopback
Hello claims (issue 28, point 5). Every subcommand talks to 127.0.0.1 only, is bounded in connections and in time (each has its own --wait/--hold/
--duration, and --max-seconds is a hard alarm over the whole run), and prints ONE JSON line of what it measured.

Frames follow include/ncclwatch/wire.h (16-byte header: magic "NCWL", major, minor, type, flags, length) and the
payload codec of lib/read/wire.cpp (u32-length strings, u32-length blocks for the HeaderInfo / CommInfo / SigInfo).

  hello-flood  --port P --count N [--token T] [--job J] [--hold S] [--wait S]
      N connections, each a valid Hello with a distinct (job, rank): job "flood-<i>" rank 0, or with --job J ranks
      0..N-1 of J. Counts HelloAck / Reject (by reason) / no reply. --hold keeps them open S seconds.
  impersonate  --port P --metrics-port M --rank R [--token T] [--pid 31337] [--duration S] [--report-dir D]
               [--log FILE ...]
      Scrapes /metrics, takes job id, host, world size, communicator id and comm rank of global rank R from it,
      says Hello as that rank (with pid --pid) and sends Digests claiming a stall. Reports whether the collector took
      it (HelloAck, rank R's /metrics series showing its claim: a collective no rank issued), whether the real rank lost its connection (its
      shim's "lost the live collector" line in --log files), DumpRequests received, and whether a live report naming
      the fake pid appeared under --report-dir.
  slowloris    --port P --count N --announce BYTES [--after-hello] [--fill BYTES] [--wait S]
      N connections that send a frame header announcing BYTES (a Digest), optionally after a Hello, then --fill
      bytes of that payload (default 0), then nothing. Reports how many the server closed within --wait seconds.
  fake-ranks   --port P --count N [--job J | --job-hex HEX] [--jobs J] [--host-bytes HEX] [--comms K] [--nranks R]
               [--world W] [--rank0 R0] [--stalled] [--token T] [--say-sent] [--hold S]
      N ranks of one job (or spread over J jobs), each a Hello and one Digest (K communicators of R ranks claimed,
      stuck for two minutes with --stalled), held open --hold seconds. The job id and host may be raw bytes (hex).
      Without a token the collector takes one rank a process (issue 45): the others are refused; with --token each
      answers its Challenge, and all are taken.
  claims       --port P [--comms K] [--nranks N] [--job J] [--rank R] [--hold S]
      One rank (this process's pid) says Hello and sends ONE Digest of K communicators (past 64: the 1.3 extension),
      each claiming N ranks and stuck for two minutes, PCI bus ids left out: at most what one frame of 1 MiB holds
      (3,971 communicators). Reports the frame's size, HelloAck / Rejects, and whether and when the server closed it.
  lively-jobs  --port P --count N [--hold S]
      N connections, each a job of its own ("lively-<i>", rank 0, this process's pid) whose counts grow: a Hello and
      two Digests, the second with one more collective completed (a job that trains, as the collector's admission
      sees it), held open --hold seconds. Counts HelloAck / Rejects by reason.
  claim        --port P --job J --rank R [--world W] [--pid P|0] [--pid-from FILE] [--token T] [--duration S]
      One Hello as rank R of job J (a made-up pid, or with 0 this process's own), before or while the job runs; if
      taken, Digests claiming a collective stuck for two minutes. Reports HelloAck, Rejects, DumpRequests, and this
      process's pid and NSpid line. --pid-from: the pid to claim is written to FILE by the test (waited for, 10 s).
  scrape       --metrics-port M [--save FILE]  |  --no-read --count N [--hold S]
      One GET /metrics: bytes, status, whether the body is UTF-8. Or N connections that send the request and never
      read, held --hold seconds.
  junk         --port P --count N [--wait S]
      N connections each sending garbage with a distinct first word (so each is a distinct "bad magic" reason).
  rss          --pid PID
      VmRSS / VmHWM (kB) of a process, from /proc/PID/status.
"""
import argparse
import json
import os
import re
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_wire import (  # noqa: E402 (the protocol, in a file of its own)
    Frames, HEADER, HOST, MAGIC, MAX_PAYLOAD, T_ACK, T_CHALLENGE, T_DIGEST, T_DUMP, T_REJECT, close_all,
    collect_replies, comm, connect, count_reject, digest, hello, http_get, parse_series, proof, raise_nofile, reject_retry, sig)


def emit(d):
    print(json.dumps(d, sort_keys=True))
    sys.stdout.flush()


def unhex(h, default):
    return bytes.fromhex(h) if h is not None else default


# ---------------------------------------------------------------- subcommands

def cmd_hello_flood(a):
    raise_nofile()
    token = a.token.encode() if a.token else b""
    socks, errs, hellos = [], 0, {}
    t0 = time.monotonic()
    for i in range(a.count):
        if a.job:
            job, rank = a.job, i
        else:
            job, rank = "flood-%d" % i, 0
        try:
            c = connect(a.port)
            hellos[i] = hello(job, rank, a.pid or os.getpid(), "flood-host", a.count if a.job else 1)
            c.sendall(hellos[i])
            socks.append(c)
        except OSError:
            errs += 1
            socks.append(None)
    send_s = time.monotonic() - t0
    acks, rejects = set(), {}

    def on(i, frs):
        for t, p in frs:
            if t == T_CHALLENGE:  # a collector with a token: prove ours (a wrong one gets "token refused")
                try:
                    socks[i].sendall(proof(token, p, hellos[i]))
                except OSError:
                    pass
            elif t == T_ACK:
                acks.add(i)
            elif t == T_REJECT:
                count_reject(rejects, p)

    closed = collect_replies(socks, a.wait, on)
    if a.hold > 0:
        time.sleep(a.hold)
    close_all(socks)
    emit({"cmd": "hello-flood", "count": a.count, "connect_errors": errs, "send_seconds": round(send_s, 3),
          "acked": len(acks), "rejected": rejects, "closed_by_server": len(closed),
          "no_reply": a.count - errs - len(acks) - sum(rejects.values())})


def cmd_impersonate(a):
    token = a.token.encode() if a.token else b""
    status, body = http_get(a.metrics_port)
    text = body.decode(errors="replace")
    issued = parse_series(text, "ncclwatch_coll_issued_total")
    mine = [d for d in issued if d.get("rank") == str(a.rank) and (a.job is None or d.get("job_id") == a.job)]
    if not mine:
        emit({"cmd": "impersonate", "error": "rank %d not in /metrics (%s)" % (a.rank, status)})
        return 2
    target = mine[0]
    # /metrics has no pid label (stable series across restarts): the impostor picks any pid.
    job, host = target["job_id"], target["Hostname"]
    comm_id, comm_rank = int(target["comm"], 16), int(target["comm_rank"])
    peers = [d for d in issued if d.get("job_id") == job and d.get("comm") == target["comm"]]
    world = max(int(d["rank"]) for d in [x for x in issued if x.get("job_id") == job]) + 1
    nranks = max(int(d["comm_rank"]) for d in peers) + 1
    top = int(max(d["_value"] for d in peers))
    # A stall: one collective past what anyone issued, stuck for two minutes.
    now = time.monotonic_ns()
    old = now - 120 * 10 ** 9

    def claim():
        return digest([comm(comm_id, comm_rank, nranks, issued=top + 1, completed=top, t_last_issue=old,
                            t_last_progress=old, stall_since=old, stall_flags=1,
                            recent=[sig(top + 1, t_issue=old)])])

    res = {"cmd": "impersonate", "job": job, "rank": a.rank, "fake_pid": a.pid,
           "host": host, "world": world, "comm": target["comm"], "hello_acked": 0, "rejects": {},
           "dump_requests_received": 0, "connections": 0, "challenges": 0, "closed_by_server": 0, "slot_taken": False,
           "claim_in_metrics_samples": 0, "metrics_samples": 0}
    deadline = time.monotonic() + a.duration
    c, fr, next_digest, next_scrape, final_reject = None, Frames(), 0.0, 0.0, False
    while time.monotonic() < deadline:
        if c is None:
            if res["connections"] >= a.max_connects:
                break
            try:
                c = connect(a.port)
                res["connections"] += 1
                h = hello(job, a.rank, a.pid, host, world)
                c.sendall(h)
                c.settimeout(0.1)
                fr = Frames()
                # As a 1.2 rank: nothing but the proof before the collector's answer to the Hello.
                answered, until = False, time.monotonic() + 3
                while not answered and time.monotonic() < until:
                    try:
                        data = c.recv(65536)
                    except socket.timeout:
                        continue
                    if not data:
                        raise ConnectionResetError
                    for ft, p in fr.feed(data):
                        if ft == T_CHALLENGE:
                            res["challenges"] += 1
                            c.sendall(proof(token, p, h))
                        elif ft == T_ACK:
                            res["hello_acked"] += 1
                            answered = True
                        elif ft == T_REJECT:
                            count_reject(res["rejects"], p)
                            final_reject = not reject_retry(p)
                            raise ConnectionResetError
                next_digest = 0.0
            except OSError:
                if c is not None:
                    c.close()
                c = None
                if final_reject:
                    break  # refused for good: a real shim stops here too (one refused "for now" tries again)
                time.sleep(0.2)
        t = time.monotonic()
        if c is not None and t >= next_digest:
            try:
                c.sendall(claim())
            except OSError:
                pass
            next_digest = t + 0.3
        try:
            if c is None:
                raise socket.timeout
            data = c.recv(65536)
            if not data:
                raise ConnectionResetError
            for ft, p in fr.feed(data):
                if ft == T_ACK:
                    res["hello_acked"] += 1
                elif ft == T_DUMP:
                    res["dump_requests_received"] += 1
                elif ft == T_REJECT:
                    count_reject(res["rejects"], p)
        except socket.timeout:
            pass
        except OSError:
            res["closed_by_server"] += 1
            c.close()
            c = None
            if res["rejects"]:
                break  # refused: a real shim stops here too
            time.sleep(0.2)
        if t >= next_scrape:
            next_scrape = t + 0.5
            try:
                _, b = http_get(a.metrics_port, timeout=5)
                # The slot is the impostor's once rank R's series show its claim: a collective no rank issued.
                for d in parse_series(b.decode(errors="replace"), "ncclwatch_coll_issued_total"):
                    if d.get("job_id") == job and d.get("rank") == str(a.rank) and d.get("comm") == target["comm"]:
                        res["metrics_samples"] += 1
                        if d["_value"] > top:
                            res["claim_in_metrics_samples"] += 1
                            res["slot_taken"] = True
            except OSError:
                pass
    if c is not None:
        c.close()
    # The real rank's shim logs each lost connection with its rank ("[ncclwatch rR] ...", or with
    # NCCLWATCH_LOG_FORMAT=full "[ncclwatch rank R pid P ...] ...").
    lost = re.compile(r"\[ncclwatch (?:r%d\]|rank %d pid \d+ ).*lost the live collector" % (a.rank, a.rank))
    res["real_rank_lost_connection_lines"] = 0
    for f in a.log or []:
        try:
            with open(f, errors="replace") as fh:
                res["real_rank_lost_connection_lines"] += sum(1 for line in fh if lost.search(line))
        except OSError:
            pass
    res["real_rank_kicked"] = res["real_rank_lost_connection_lines"] > 0
    reports = []
    if a.report_dir:
        for root, _dirs, files in os.walk(a.report_dir):
            for f in files:
                if f.startswith("live-report") and not f.endswith(".tmp"):
                    p = os.path.join(root, f)
                    try:
                        with open(p, errors="replace") as fh:
                            if re.search(r"\b%d\b" % a.pid, fh.read()):
                                reports.append(p)
                    except OSError:
                        pass
    res["reports_naming_fake_pid"] = sorted(reports)
    res["false_report"] = bool(reports)
    emit(res)
    return 0


def cmd_slowloris(a):
    raise_nofile()
    token = a.token.encode() if a.token else b""
    socks, errs, acks = [], 0, set()
    fill = min(a.fill, max(0, a.announce - 1))
    chunk = b"\0" * min(fill, 1 << 16)
    t0 = time.monotonic()
    for i in range(a.count):
        try:
            c = connect(a.port)
            if a.after_hello:
                c.sendall(hello(a.job, i, os.getpid(), "slow-host", a.count, token))
            c.sendall(HEADER.pack(MAGIC, 1, 0, T_DIGEST, 0, a.announce))
            left = fill
            while left > 0:
                n = min(left, len(chunk))
                c.sendall(chunk[:n])
                left -= n
            socks.append(c)
        except OSError:
            errs += 1
            socks.append(None)
    send_s = time.monotonic() - t0

    def on(i, frs):
        for t, _ in frs:
            if t == T_ACK:
                acks.add(i)

    closed = collect_replies(socks, a.wait, on)
    close_all(socks)
    times = sorted(closed.values())
    emit({"cmd": "slowloris", "count": a.count, "announce": a.announce, "fill": fill, "after_hello": a.after_hello,
          "connect_errors": errs, "send_seconds": round(send_s, 3), "hello_acked": len(acks), "wait": a.wait,
          "closed_by_server": len(closed), "still_open": a.count - errs - len(closed),
          "first_close_s": round(times[0], 3) if times else None,
          "last_close_s": round(times[-1], 3) if times else None})


def cmd_fake_ranks(a):
    raise_nofile()
    token = a.token.encode() if a.token else b""
    job = unhex(a.job_hex, a.job.encode())
    if a.jobs > 1:  # --jobs J: the ranks spread over J jobs, "<job>-<j>"
        base = job
        job = lambda i: base + b"-%d" % (i % a.jobs)  # noqa: E731
    host = unhex(a.host_bytes, b"fake-host")
    socks, errs, acks, rejects = [], 0, set(), {}
    hellos, digests = {}, {}
    now = time.monotonic_ns()
    for i in range(a.count):
        try:
            c = connect(a.port)
            nranks = a.nranks or a.count
            old = now - 120 * 10 ** 9  # --stalled: one collective outstanding for two minutes
            comms = [comm(0x1000 + k, (a.rank0 + i) % nranks, nranks, issued=101 + k if a.stalled else 100 + k,
                          completed=100 + k, t_last_issue=old if a.stalled else now,
                          t_last_progress=old if a.stalled else now) for k in range(a.comms)]
            hellos[i] = hello(job(i) if callable(job) else job, a.rank0 + i, os.getpid(), host, a.world or a.count)
            digests[i] = digest(comms)
            # With a token the Digest waits for the Challenge (its answer first); without, it follows the Hello.
            c.sendall(hellos[i] + (b"" if token else digests[i]))
            socks.append(c)
        except OSError:
            errs += 1
            socks.append(None)
    if a.say_sent:  # for a test to wait on
        print("fake-ranks: sent %d" % a.count, file=sys.stderr, flush=True)

    def on(i, frs):
        for t, p in frs:
            if t == T_CHALLENGE:
                try:
                    socks[i].sendall(proof(token, p, hellos[i]) + digests[i])
                except OSError:
                    pass
            elif t == T_ACK:
                acks.add(i)
            elif t == T_REJECT:
                count_reject(rejects, p)

    closed = collect_replies(socks, a.hold, on)
    close_all(socks)
    emit({"cmd": "fake-ranks", "count": a.count, "comms": a.comms, "job_hex": (job(0) if callable(job) else job).hex(),
          "host_hex": host.hex(),
          "connect_errors": errs, "acked": len(acks), "rejected": rejects, "closed_by_server": len(closed)})


def cmd_claims(a):
    c = connect(a.port)
    now = time.monotonic_ns()
    old = now - 120 * 10 ** 9
    comms = [comm(0x2000 + k, a.rank, a.nranks, issued=101, completed=100, t_last_issue=old, t_last_progress=old,
                  stall_since=old, stall_flags=1, pci="") for k in range(a.comms)]
    d = digest(comms)
    while len(d) - HEADER.size > MAX_PAYLOAD:  # as many as one frame holds (about 3,970 at 264 bytes a block)
        comms = comms[:-max(1, (len(d) - HEADER.size - MAX_PAYLOAD) // 264)]
        d = digest(comms)
    res = {"cmd": "claims", "comms": len(comms), "nranks": a.nranks, "frame_bytes": len(d), "acked": False,
           "rejects": {}, "closed_by_server": False, "closed_after_s": None}
    t0 = time.monotonic()
    c.sendall(hello(a.job, a.rank, os.getpid(), "claims-host", a.nranks) + d)

    def on(_i, frs):
        for t, p in frs:
            if t == T_ACK:
                res["acked"] = True
            elif t == T_REJECT:
                count_reject(res["rejects"], p)

    closed = collect_replies([c], a.hold, on)
    if closed:
        res["closed_by_server"] = True
        res["closed_after_s"] = round(closed[0], 3)
    res["seconds"] = round(time.monotonic() - t0, 3)
    close_all([c])
    emit(res)
    return 0


def cmd_lively_jobs(a):
    raise_nofile()
    socks, errs, acks, rejects = [], 0, set(), {}
    for i in range(a.count):
        try:
            c = connect(a.port)
            now = time.monotonic_ns()
            # Two digests: the second completed one more collective than the first (admission.h: training).
            d = [digest([comm(0x3000, 0, 1, issued=100 + k, completed=100 + k, t_last_issue=now, t_last_progress=now)])
                 for k in (0, 1)]
            c.sendall(hello("lively-%d" % i, 0, os.getpid(), "lively-host", 1) + d[0] + d[1])
            socks.append(c)
        except OSError:
            errs += 1
            socks.append(None)
    print("lively-jobs: sent %d" % a.count, file=sys.stderr, flush=True)  # for a test to wait on

    def on(i, frs):
        for t, p in frs:
            if t == T_ACK:
                acks.add(i)
            elif t == T_REJECT:
                count_reject(rejects, p)

    closed = collect_replies(socks, a.hold, on)
    close_all(socks)
    emit({"cmd": "lively-jobs", "count": a.count, "connect_errors": errs, "acked": len(acks), "rejected": rejects,
          "closed_by_server": len(closed)})
    return 0


def cmd_claim(a):
    """One Hello as rank R of job J (pid --pid, or ours with --pid 0), before or while the job runs; once taken,
    Digests claiming a collective stuck for two minutes, every 0.3 s for --duration."""
    token = a.token.encode() if a.token else b""
    pid = a.pid or os.getpid()
    if a.pid_from:
        deadline = time.monotonic() + 10
        while not (os.path.exists(a.pid_from) and open(a.pid_from).read().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(open(a.pid_from).read().strip())
    nspid = ""
    try:
        nspid = [l.split(":", 1)[1].split() for l in open("/proc/self/status") if l.startswith("NSpid:")][0]
    except (OSError, IndexError):
        pass
    res = {"cmd": "claim", "job": a.job, "rank": a.rank, "pid": pid, "acked": False, "rejects": {},
           "dump_requests_received": 0, "closed_by_server": False, "own_pid": os.getpid(), "nspid": nspid,
           "uid": os.getuid()}
    now = time.monotonic_ns()
    old = now - 120 * 10 ** 9
    stuck = digest([comm(0x5151, a.rank, a.world, issued=6, completed=5, t_last_issue=old, t_last_progress=old,
                         stall_since=old, stall_flags=1, recent=[sig(6, t_issue=old)])])
    c = connect(a.port)
    h = hello(a.job, a.rank, pid, a.host, a.world)
    c.sendall(h)
    c.settimeout(0.1)
    fr, deadline, next_digest = Frames(), time.monotonic() + a.duration, 0.0
    answered_by = time.monotonic() + 5
    while time.monotonic() < deadline:
        t = time.monotonic()
        if res["acked"] and t >= next_digest:
            try:
                c.sendall(stuck)
            except OSError:
                res["closed_by_server"] = True
                break
            next_digest = t + 0.3
        try:
            data = c.recv(65536)
            if not data:
                res["closed_by_server"] = True
                break
            for ft, p in fr.feed(data):
                if ft == T_CHALLENGE:
                    c.sendall(proof(token, p, h))
                elif ft == T_ACK:
                    res["acked"] = True
                elif ft == T_DUMP:
                    res["dump_requests_received"] += 1
                elif ft == T_REJECT:
                    count_reject(res["rejects"], p)
        except socket.timeout:
            if not res["acked"] and not res["rejects"] and t > answered_by:
                break
        except OSError:
            res["closed_by_server"] = True
            break
        if res["rejects"] and not res["acked"]:
            break
    c.close()
    emit(res)
    return 0


def cmd_scrape(a):
    if not a.no_read:
        t0 = time.monotonic()
        try:
            status, body = http_get(a.metrics_port, timeout=a.timeout)
        except OSError as e:
            emit({"cmd": "scrape", "error": str(e)})
            return 1
        try:
            body.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        if a.save:
            with open(a.save, "wb") as f:
                f.write(body)
        emit({"cmd": "scrape", "status": status, "bytes": len(body), "utf8": utf8,
              "lines": body.count(b"\n"), "seconds": round(time.monotonic() - t0, 3),
              "replacement_chars": body.count("\ufffd".encode())})
        return 0
    raise_nofile()
    socks, errs = [], 0
    for _ in range(a.count):
        try:
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
            c.settimeout(5)
            c.connect((HOST, a.metrics_port))
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            socks.append(c)
        except OSError:
            errs += 1
    time.sleep(a.hold)
    close_all(socks)
    emit({"cmd": "scrape", "no_read": True, "count": a.count, "connect_errors": errs, "held_s": a.hold})
    return 0


def cmd_junk(a):
    raise_nofile()
    socks, errs = [], 0
    t0 = time.monotonic()
    for i in range(a.count):
        try:
            c = connect(a.port)
            # A distinct first word per connection: each is its own "bad magic 0x........" reason.
            c.sendall(struct.pack("<I", 0x10000000 + i) + os.urandom(28))
            socks.append(c)
        except OSError:
            errs += 1
            socks.append(None)
    send_s = time.monotonic() - t0
    closed = collect_replies(socks, a.wait, lambda i, f: None)
    close_all(socks)
    emit({"cmd": "junk", "count": a.count, "connect_errors": errs, "send_seconds": round(send_s, 3),
          "closed_by_server": len(closed)})


def read_rss(pid):
    out = {"pid": pid}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k.lower() + "_kb"] = int(v.split()[0])
    except OSError as e:
        out["error"] = str(e)
    return out


def cmd_rss(a):
    d = read_rss(a.pid)
    d["cmd"] = "rss"
    emit(d)
    return 0 if "error" not in d else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-seconds", type=float, default=150, help="hard limit on the whole run (SIGALRM)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("hello-flood")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--token")
    p.add_argument("--job")
    p.add_argument("--pid", type=int, default=0, help="the pid each Hello claims (default: this process's own)")
    p.add_argument("--hold", type=float, default=0)
    p.add_argument("--wait", type=float, default=3, help="seconds to collect replies")

    p = sub.add_parser("impersonate")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--token")
    p.add_argument("--job")
    p.add_argument("--pid", type=int, default=31337)
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--max-connects", type=int, default=50)
    p.add_argument("--report-dir")
    p.add_argument("--log", action="append")

    p = sub.add_parser("claim")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--host", default="claim-host")
    p.add_argument("--pid", type=int, default=31337, help="0: this process's own")
    p.add_argument("--pid-from", help="a file the test writes the pid to claim into (waited for)")
    p.add_argument("--token")
    p.add_argument("--duration", type=float, default=8)

    p = sub.add_parser("claims")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--comms", type=int, default=4096)
    p.add_argument("--nranks", type=int, default=65536)
    p.add_argument("--job", default="claims")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--hold", type=float, default=5)

    p = sub.add_parser("lively-jobs")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--hold", type=float, default=10)

    p = sub.add_parser("slowloris")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--announce", type=int, default=MAX_PAYLOAD)
    p.add_argument("--fill", type=int, default=0, help="payload bytes sent after the header (< announce)")
    p.add_argument("--after-hello", action="store_true")
    p.add_argument("--job", default="slowloris")
    p.add_argument("--token")
    p.add_argument("--wait", type=float, default=15)

    p = sub.add_parser("fake-ranks")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--job", default="fake-job")
    p.add_argument("--job-hex")
    p.add_argument("--host-bytes")
    p.add_argument("--comms", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="spread the ranks over this many jobs")
    p.add_argument("--nranks", type=int, default=0, help="the size each communicator claims (default --count)")
    p.add_argument("--world", type=int, default=0, help="the world size each Hello claims (default --count)")
    p.add_argument("--rank0", type=int, default=0, help="the first rank's global rank")
    p.add_argument("--stalled", action="store_true", help="each communicator stuck for two minutes")
    p.add_argument("--say-sent", action="store_true", help="say on stderr when every Hello is sent")
    p.add_argument("--token")
    p.add_argument("--hold", type=float, default=10)

    p = sub.add_parser("scrape")
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--save")
    p.add_argument("--timeout", type=float, default=20)
    p.add_argument("--no-read", action="store_true")
    p.add_argument("--count", type=int, default=30)
    p.add_argument("--hold", type=float, default=10)

    p = sub.add_parser("junk")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--wait", type=float, default=5)

    p = sub.add_parser("rss")
    p.add_argument("--pid", type=int, required=True)

    a = ap.parse_args()
    for n in ("count",):
        if getattr(a, n, 1) is not None and getattr(a, n, 1) > 20000:
            ap.error("--count is capped at 20000")
    signal.signal(signal.SIGALRM, lambda *_: (emit({"cmd": a.cmd, "error": "max-seconds reached"}), os._exit(3)))
    signal.alarm(max(1, int(a.max_seconds)))
    fn = {"hello-flood": cmd_hello_flood, "impersonate": cmd_impersonate, "claim": cmd_claim, "claims": cmd_claims,
          "lively-jobs": cmd_lively_jobs,
          "slowloris": cmd_slowloris,
          "fake-ranks": cmd_fake_ranks, "scrape": cmd_scrape, "junk": cmd_junk, "rss": cmd_rss}[a.cmd]
    return fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())

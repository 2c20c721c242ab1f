#!/usr/bin/env python3
"""A minimal NCCL RAS client (what `ncclras` does, NCCL 2.28 client protocol 2), for machines without ncclras.

    ras_query.py [--host localhost] [--port 28028] [--timeout 5] [--verbose] [--total-sec 30]

Sends "CLIENT PROTOCOL 2", expects "SERVER PROTOCOL N", sets the collective timeout ("TIMEOUT s" -> "OK"), then
"STATUS" (or "VERBOSE STATUS") and prints everything NCCL sends until it closes the connection. Exit 0 when a status
came back, 1 otherwise (the reason on stderr). NCCL listens on NCCL_RAS_ADDR (default localhost:28028).
"""
import argparse
import socket
import sys
import time


def read_line(sock, deadline):
    buf = b""
    while not buf.endswith(b"\n"):
        sock.settimeout(max(0.1, deadline - time.time()))
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


def query(host, port, timeout, verbose, total_sec):
    deadline = time.time() + total_sec
    try:
        sock = socket.create_connection((host, port), timeout=5)
    except OSError as e:
        return None, f"cannot connect to the NCCL RAS service at {host}:{port}: {e}"
    with sock:
        try:
            sock.sendall(b"CLIENT PROTOCOL 2\n")
            hello = read_line(sock, deadline)
            if not hello.upper().startswith("SERVER PROTOCOL "):
                return None, f"unexpected answer to the handshake: {hello!r}"
            sock.sendall(f"TIMEOUT {timeout}\n".encode())
            ok = read_line(sock, deadline)
            if ok.strip().upper() != "OK":
                return None, f"unexpected answer to TIMEOUT: {ok!r}"
            sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
            out = b""
            while time.time() < deadline:
                sock.settimeout(max(0.1, deadline - time.time()))
                chunk = sock.recv(65536)
                if not chunk:
                    return out.decode(errors="replace"), None
                out += chunk
            return out.decode(errors="replace"), f"no end of the status within {total_sec} s (partial output above)"
        except OSError as e:
            return None, f"RAS connection failed: {e}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=28028)
    p.add_argument("--timeout", type=int, default=5, help="seconds NCCL waits for the other processes' answers")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--total-sec", type=float, default=30.0)
    a = p.parse_args()
    out, err = query(a.host, a.port, a.timeout, a.verbose, a.total_sec)
    if out:
        sys.stdout.write(out)
    if err:
        print(f"ras_query: {err}", file=sys.stderr)
    return 0 if out and not err else 1


if __name__ == "__main__":
    sys.exit(main())

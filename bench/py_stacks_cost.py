#!/usr/bin/env python3
# What one Python stacks capture costs (shim/watch/py_stacks.cpp): a 1-rank job over the test NCCL (ctypes) with THREADS
# Python threads DEPTH frames deep, then ROUNDS dumps asked for with SIGUSR1; each dump JSON says how long its capture
# took (python_stacks.capture_ns). Prints the median and the largest. RSS_MB > 0: the process first touches that many
# MiB (numpy pages where numpy is installed, else a bytearray, one write per 4 KiB page), as a training process holds
# gigabytes: the copy the capture runs in copies the page tables of all of it.
#   LD_PRELOAD=build/shim/libncclwatch.so NCCLWATCH_DIR=$(mktemp -d) \
#     FAKE_NCCL_LIB=build/test/fake_nccl/libnccl.so.2 python3 bench/py_stacks_cost.py [THREADS] [DEPTH] [ROUNDS] \
#     [RSS_MB]
import ctypes
import glob
import json
import os
import signal
import statistics
import sys
import threading
import time

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 8
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 30
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
rss_mb = int(sys.argv[4]) if len(sys.argv) > 4 else 0

ballast = None
how = ""
if rss_mb > 0:
    try:
        import numpy

        ballast = numpy.ones(rss_mb << 17, dtype=numpy.float64)  # 8 bytes each: rss_mb MiB, every page written
        how = "numpy"
    except ImportError:
        ballast = bytearray(rss_mb << 20)
        ballast[::4096] = b"\x01" * ((rss_mb << 20) // 4096)
        how = "bytearray"


def touch():
    """Writes one byte of every page of the ballast: after a capture each write is a copy-on-write fault."""
    t = time.perf_counter()
    if how == "numpy":
        ballast[::512] += 1.0
    else:
        ballast[::4096] = b"\x02" * ((rss_mb << 20) // 4096)
    return time.perf_counter() - t


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# Loaded into the global scope and called through it, as the dynamic linker binds libtorch's calls: the preloaded
# shim's wrappers come first (a handle of the library itself would bypass them).
ctypes.CDLL(os.environ["FAKE_NCCL_LIB"], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(None)


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_void_p]
os.environ.pop("FAKE_NCCL_ID_FILE", None)
uid = UniqueId()
lib.ncclGetUniqueId(ctypes.byref(uid))
comm = ctypes.c_void_p()
assert lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
buf = (ctypes.c_float * 4)()
lib.ncclAllReduce(buf, buf, 4, 7, 0, comm, None)

stop = threading.Event()


def deep(n):
    if n:
        return deep(n - 1)
    stop.wait()


for _ in range(threads - 1):
    threading.Thread(target=deep, args=(depth,), daemon=True).start()

root = os.environ["NCCLWATCH_DIR"]


def dump_text():
    files = glob.glob(f"{root}/*/*.dump.json")
    if not files:
        return None
    try:
        with open(files[0]) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main_thread_deep(n):
    if n:
        return main_thread_deep(n - 1)
    costs = []
    base = [touch() for _ in range(3)] if rss_mb else []
    after = []
    last = None
    for _ in range(rounds):
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            d = dump_text()
            if d and d.get("time") != last and "python_stacks" in d:
                last = d["time"]
                costs.append(d["python_stacks"]["capture_ns"])
                nthreads = len(d["python_stacks"].get("threads", []))
                if rss_mb:
                    after.append(touch())
                break
            time.sleep(0.01)
    costs = sorted(costs)
    size = f", RSS {rss_kb() / 1024:.0f} MiB ({how} ballast of {rss_mb} MiB)" if rss_mb else f", RSS {rss_kb() / 1024:.0f} MiB"
    print(f"{len(costs)} captures of {nthreads} threads, {depth} frames deep{size}: median "
          f"{statistics.median(costs) / 1e3:.0f} us, max {costs[-1] / 1e3:.0f} us")
    if rss_mb:
        print(f"writing every page of the ballast: {statistics.median(base) * 1e3:.1f} ms without a capture, "
              f"{statistics.median(after) * 1e3:.1f} ms (median) right after one (copy-on-write faults)")


main_thread_deep(depth)
stop.set()

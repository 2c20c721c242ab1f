#!/usr/bin/env python3
# What one Python stacks capture costs (shim/py_stacks.cpp): a 1-rank job over the test NCCL (ctypes) with THREADS
# Python threads DEPTH frames deep, then ROUNDS dumps asked for with SIGUSR1; each dump JSON says how long its capture
# took (python_stacks.capture_ns). Prints the median and the largest.
#   LD_PRELOAD=build/shim/libncclwatch.so NCCLWATCH_DIR=$(mktemp -d) \
#     FAKE_NCCL_LIB=build/test/fake_nccl/libnccl.so.2 python3 bench/py_stacks_cost.py [THREADS] [DEPTH] [ROUNDS]
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
                break
            time.sleep(0.01)
    costs = sorted(costs)
    print(f"{len(costs)} captures of {nthreads} threads, {depth} frames deep: median "
          f"{statistics.median(costs) / 1e3:.0f} us, max {costs[-1] / 1e3:.0f} us")


main_thread_deep(depth)
stop.set()

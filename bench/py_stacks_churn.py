#!/usr/bin/env python3
# The Python stacks capture under churn (docs/PERFORMANCE.md): a 1-rank job over the test NCCL that starts and joins
# threads recursing 50 deep while its main thread asks for a dump (SIGUSR1) every 5 ms, for SECONDS; prints
# "survived" unless the process died. Run with NCCLWATCH_POLL_MS=10 (a dump every poll):
#   NCCLWATCH_POLL_MS=10 LD_PRELOAD=build/shim/libncclwatch.so NCCLWATCH_DIR=$(mktemp -d) \
#     FAKE_NCCL_LIB=build/test/fake_nccl/libnccl.so.2 python3 bench/py_stacks_churn.py 8
import ctypes, os, signal, threading, time, sys
ctypes.CDLL(os.environ["FAKE_NCCL_LIB"], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(None)
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]
lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
os.environ.pop("FAKE_NCCL_ID_FILE", None)
uid = UniqueId(); lib.ncclGetUniqueId(ctypes.byref(uid))
comm = ctypes.c_void_p(); assert lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
def rec(n):
    if n: return rec(n - 1) + 1
    return 0
def worker():
    for _ in range(200): rec(50)
end = time.monotonic() + float(sys.argv[1])
def churn():
    while time.monotonic() < end:
        ts = [threading.Thread(target=worker) for _ in range(4)]
        [t.start() for t in ts]; [t.join() for t in ts]
threading.Thread(target=churn).start()
while time.monotonic() < end:
    os.kill(os.getpid(), signal.SIGUSR1); rec(80); time.sleep(0.005)
print("survived")

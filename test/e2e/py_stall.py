#!/usr/bin/env python3
# A small CPython training loop over the test NCCL (ctypes on test/fake_nccl's libnccl.so.2), run by fake_launch:
# rank STALL_RANK stalls in slow_eval at step STALL_STEP until STOP_FILE exists; the others wait in all_reduce. A
# second Python thread (a "loader") is there so that the report must pick the thread that issued NCCL calls. Rank
# RAISE_RANK dies at step RAISE_STEP of an uncaught exception (as torch's CUDA out-of-memory error), and its exit then
# takes EXIT_SLOW_SEC (atexit work, as torch's teardown) before the process is gone; RAISE_MESSAGE, if set, is the
# exception's message. With TORCH_TIMEOUT_SEC, as a torch job (test/e2e/fake_torch: torch.distributed's API, nothing
# of its work): init_process_group(timeout=...) before the first collective (torch's lazy init), a gloo group and an
# NCCL group with a longer timeout, and torch's NCCL watchdog: a thread named pt_nccl_watchdg that aborts the process
# (SIGABRT) when an all_reduce outlives the timeout, as torch's does once its Flight Recorder dump is done.
import ctypes
import os
import sys
import threading
import time

# Loaded into the global scope and called through it, as the dynamic linker binds libtorch's calls: the preloaded
# shim's wrappers come first (a handle of the library itself would bypass them).
ctypes.CDLL(os.environ["FAKE_NCCL_LIB"], mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(None)
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
stall_rank = int(os.environ.get("STALL_RANK", "-1"))
stall_step = int(os.environ.get("STALL_STEP", "3"))
steps = int(os.environ.get("STEPS", "6"))
stop_file = os.environ.get("STOP_FILE", "")
raise_rank = int(os.environ.get("RAISE_RANK", "-1"))
raise_step = int(os.environ.get("RAISE_STEP", "3"))


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_void_p]
lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]


def check(rc, what):
    if rc != 0:
        sys.exit(f"py_stall: rank {rank}: {what} returned {rc}")


def exchange_id():
    path = os.environ["FAKE_NCCL_ID_FILE"]
    uid = UniqueId()
    if rank == 0:
        check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(ctypes.string_at(ctypes.addressof(uid), 128))
        os.rename(tmp, path)
        return uid
    deadline = time.monotonic() + 60
    while True:
        try:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) == 128:
                break
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            sys.exit("py_stall: no unique id")
        time.sleep(0.01)
    ctypes.memmove(ctypes.addressof(uid), data, 128)
    return uid


in_collective_since = [0.0]  # when the all_reduce in flight began (0: none), for the watchdog


def all_reduce(comm, buf):
    in_collective_since[0] = time.monotonic()
    check(lib.ncclAllReduce(buf, buf, 16, 7, 0, comm, None), "ncclAllReduce")  # WAIT_LINE
    in_collective_since[0] = 0.0


def torch_watchdog(timeout_s):
    libc = ctypes.CDLL(None)
    libc.prctl(15, b"pt_nccl_watchdg", 0, 0, 0)  # PR_SET_NAME, as torch's thread is named
    while True:
        since = in_collective_since[0]
        if since and time.monotonic() - since > timeout_s:
            print(f"py_stall: rank {rank}: Watchdog caught collective operation timeout: Timeout(ms)="
                  f"{int(timeout_s * 1000)}", file=sys.stderr, flush=True)
            os.abort()
        time.sleep(0.05)


def init_torch():
    """torch.distributed as a user calls it; the watchdog thread. The groups' timeouts: the shortest is the one noted."""
    import datetime

    import torch.distributed as dist

    timeout_s = float(os.environ["TORCH_TIMEOUT_SEC"])
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s))
    dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s / 10))  # not NCCL's: not noted
    dist.new_group(timeout=datetime.timedelta(seconds=timeout_s * 10))
    threading.Thread(target=torch_watchdog, args=(timeout_s,), daemon=True).start()


def slow_eval():
    evt = threading.Event()
    while not os.path.exists(stop_file):
        evt.wait(0.05)  # STALL_LINE


def allocate():
    raise RuntimeError(os.environ.get("RAISE_MESSAGE", "CUDA out of memory. Tried to allocate 32.00 TiB"))  # RAISE_LINE


def loader():
    while True:
        time.sleep(0.2)  # LOADER_LINE


def train(comm):
    buf = (ctypes.c_float * 16)()
    for step in range(steps):
        if rank == stall_rank and step == stall_step:
            slow_eval()  # CALLER_LINE
        if rank == raise_rank and step == raise_step:
            slow = float(os.environ.get("EXIT_SLOW_SEC", "0"))
            if slow:
                import atexit

                atexit.register(time.sleep, slow)
            allocate()
        all_reduce(comm, buf)


def main():
    threading.Thread(target=loader, daemon=True).start()
    if os.environ.get("TORCH_TIMEOUT_SEC"):
        init_torch()
    uid = exchange_id()
    comm = ctypes.c_void_p()
    check(lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank), "ncclCommInitRank")
    if rank == 0:
        os.remove(os.environ["FAKE_NCCL_ID_FILE"])
    train(comm)
    check(lib.ncclCommDestroy(comm), "ncclCommDestroy")
    print(f"py_stall: rank {rank} done")


main()

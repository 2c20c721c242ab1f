// The Python stacks of every thread of this process (format 1.5: the rank file's Python stacks region), captured on
// one of our threads (the watchdog, the dump writer, the exit path), never on a training or NCCL thread. Only where
// the process runs CPython: Py_IsInitialized (dlsym RTLD_DEFAULT) must return 1. The dump is CPython's own
// faulthandler routine, _Py_DumpTracebackThreads(fd, PyInterpreterState_Main(), NULL), which its
// dump_traceback_later thread also calls without the GIL (3.8 to 3.12; PyUnstable_DumpTracebackThreads from 3.15),
// run in a copy of the process. CPython 3.13 and 3.14 export neither: their stacks are read in place from the debug
// offsets at _PyRuntime (py_debug_offsets.h) into the same text; a CPython with neither (a debug offsets version not
// known) gets "Python stacks not available: ..." in the region. We never take the GIL and never wait: a capture
// already in progress on another of our threads is skipped.
#pragma once

#include <cstdint>

#include "ncclwatch/format.h"

namespace ncw {

struct Runtime;

// Called once per thread that issues NCCL calls (the first time the shim caches its tid): its pthread_self() and tid
// into a fixed table, so a capture can say which Python thread issued NCCL ops. No lock, no allocation, no syscall.
void py_note_nccl_thread(uint32_t tid) noexcept;

// Captures every Python thread's stack into the region and publishes it (seqlock). Returns what the region now says.
// NCCLWATCH_PY_STACKS=0: Disabled, nothing looked up.
disk::PyStacksStatus py_stacks_capture(Runtime& rt, disk::PyStacksReason reason) noexcept;

// How long the last capture took (ns), for the dump and docs/PERFORMANCE.md; 0 before the first.
uint64_t py_stacks_last_capture_ns() noexcept;

}  // namespace ncw

// The shim's process-wide state, a plain struct that every room reads. It comes into being at the first communicator
// init (shim/start/startup.cpp; a process that never uses NCCL gets no thread and no file) and is never destroyed:
// wrappers and our threads may run during exit.
#pragma once

#include <nccl.h>

#include <atomic>
#include <string>
#include <vector>

#include "shim/base/config.h"
#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "shim/record/process_identity.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"

namespace ncw {

class CompletionTracker;  // shim/complete/completion_tracker.h

struct Runtime {
    Config cfg;
    ProcessIdentity id;
    RankFileWriter file;
    EnvList env;
    CommRegistry comms;
    SlotTable slots;
    PassCounter watchdog_pass;             // the watchdog's polls (comm_slots.h)
    CompletionTracker* tracker = nullptr;  // nullptr: CPU semantics (complete on return)
    BacktraceFn backtrace = nullptr;
    std::atomic<uint32_t> group_counter{0};
    std::atomic<uint64_t> initall_counter{0};
    std::atomic<int> pending_identities{0};  // communicators whose rank/size/device NCCL could not tell yet
    int nccl_version = 0;
};

extern std::atomic<Runtime*> g_runtime;

// The hot path's check: nullptr means pass-through (not started, disabled, or a forked child).
inline Runtime* runtime() { return g_runtime.load(std::memory_order_acquire); }

}  // namespace ncw

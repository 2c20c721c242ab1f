// The shim's process-wide state. It comes into being at the first communicator init (a process that never uses
// NCCL gets no thread and no file) and is never destroyed: wrappers and our threads may run during exit.
#pragma once

#include <nccl.h>

#include <atomic>
#include <string>
#include <vector>

#include "comm_registry.h"
#include "comm_slots.h"
#include "completion_tracker.h"
#include "config.h"
#include "process_identity.h"
#include "rank_file_writer.h"
#include "recorder.h"

namespace ncw {

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

// Starts the runtime if it is not running yet and the shim is enabled. Called at communicator init.
Runtime* start_runtime();

// Two-phase communicator registration: begin before the real init call (so an init that never returns is on
// record, with the rank and the communicator it was joining), finish after it.
struct CommInitInfo {
    uint64_t comm_id = 0;
    int rank = -1;
    int nranks = 0;
    uint64_t parent_id = 0;
    int color = -1;
    int key = -1;
    const ncclConfig_t* config = nullptr;
    disk::OpType event = disk::OpType::CommInit;
};
CommRuntime* begin_comm(Runtime& rt, const CommInitInfo& info);
void finish_comm(Runtime& rt, CommRuntime* cr, ncclComm_t comm, ncclResult_t result);

// For a communicator created before the shim could see it (the slow path, once per communicator).
CommRuntime* adopt_unknown_comm(Runtime& rt, ncclComm_t comm);

// Fills what a nonblocking or grouped init could not tell at once (rank, size, device). Called on the host's
// threads only (outermost ncclGroupEnd, ncclCommGetAsyncError reporting success).
void refresh_comm_identity(Runtime& rt, CommRuntime& cr);
void refresh_pending_identities(Runtime& rt);

}  // namespace ncw

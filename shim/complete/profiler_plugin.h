// The shim as NCCL's profiler plugin (NCCL 2.26+): the GPU start and end of every collective (and, 2.28+, every send
// and receive) from NCCL's own events, instead of sampled CUDA events (profiler_link.h says how an op is tied to its
// events).
//
// How NCCL finds us: at the first communicator init NCCL loads the plugin named by NCCL_PROFILER_PLUGIN. When that is
// unset, our constructor sets it to STATIC_PLUGIN (before any thread runs, so setenv races with no getenv), which
// makes NCCL look the symbols up among the objects already loaded: ours, preloaded. A child process that inherits the
// variable without preloading us finds no plugin there and runs without one. A plugin the user chose (NCCL Inspector,
// say) is kept; we fall back to CUDA events and say so once.
#pragma once

#include <cstdint>

#include "ncclwatch/api_table.h"
#include "ncclwatch/nccl_profiler_abi.h"
#include "shim/base/config.h"

namespace ncw {

struct Runtime;
struct CommRuntime;

// What the constructor found and did, for the runtime's first log lines.
struct ProfilerSetup {
    bool we_set_env = false;            // NCCL_PROFILER_PLUGIN was unset: we pointed it at ourselves
    const char* user_plugin = nullptr;  // set by the user to something else: kept (nullptr: none, or ours)
    ProfilerMode mode = ProfilerMode::Auto;
};
const ProfilerSetup& profiler_setup();
// Why the shim asks this NCCL (its NCCL_VERSION_CODE) for no profiler events: the cost NCCL_PROFILER_REGRESSIONS
// names (api_table.h), or nullptr when it has none.
const char* profiler_regression(int nccl_version);
// Logs, once, what the constructor did (called when the runtime starts: the logger and Config exist then).
void profiler_log_setup(const Runtime& rt);

// Copies what NCCL's events proved into the communicators' progress blocks (our threads: the watchdog's pass, a
// teardown). Never called on the hot path.
void profiler_publish(Runtime& rt);
void profiler_publish_one(CommRuntime& cr);

// The completion tracker's catch-up event after the communicator's collectives up to `coll_seq` on one stream
// completed: those NCCL's profiler follows are done (a communicator's kernels run one after another), whatever their
// algorithm's stops said. The poller's thread.
void profiler_covered(CommRuntime& cr, uint64_t coll_seq);
// A host synchronisation proved the communicator's ops complete: collectives up to `coll_seq` and every op up to
// `op_index` (shim/complete/sync_apply.cpp), by `end_mono` at the latest. The poller's thread.
void profiler_proven(CommRuntime& cr, uint64_t coll_seq, uint64_t op_index, uint64_t end_mono);

// The exported tables' functions (profiler_exports.cpp holds the tables NCCL looks up by name).
namespace prof_cb {
prof::Result init_v3(void** ctx, int* mask);
prof::Result init_v4(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank,
                     prof::Logger log);
prof::Result init_v5(void** ctx, uint64_t hash, int* mask, const char* name, int nnodes, int nranks, int rank,
                     prof::Logger log);
prof::Result start_v3(void* ctx, void** handle, prof::DescrV3* d);
prof::Result start_v4(void* ctx, void** handle, prof::DescrV4* d);
prof::Result start_v5(void* ctx, void** handle, prof::DescrV5* d);
prof::Result init_v7(void** ctx, uint64_t hash, int* mask, const char* name, int nnodes, int nranks, int rank,
                     prof::Logger log);
prof::Result start_v7(void* ctx, void** handle, prof::DescrV7* d);
prof::Result stop(void* handle);
prof::Result record_v3(void* handle, int state, prof::StateArgsV3* args);
prof::Result record_v4(void* handle, int state, prof::StateArgsV4* args);
prof::Result finalize(void* ctx);
}  // namespace prof_cb

}  // namespace ncw

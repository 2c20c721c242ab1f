// The fake communicator: its life cycle, the blocking model of its operations and NCCL groups. The exported C API
// (fake_nccl_api.cpp) validates arguments and forwards here.
//
// Blocking model: an operation "arrives" by bumping a monotonic counter in the communicator's shared segment and
// completes once the peers' counters show they arrived too. Buffers are never touched.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "fake_nccl_shm.h"

namespace ncw::fake {

inline constexpr uint32_t kCommMagic = 0x434f4d4d;      // "COMM"
inline constexpr uint32_t kDeadCommMagic = 0x44454144;  // "DEAD": destroyed; the object is kept to catch reuse

struct Comm {
    uint32_t magic = kCommMagic;
    Segment* seg = nullptr;
    std::string shm_name;
    ncclUniqueId id{};
    int nranks = 0;
    int rank = 0;
    int device = 0;
    bool nonblocking = false;
    bool counted = false;   // this rank is counted in seg->attached (cleared by the first of abort/destroy)
    uint64_t coll_seq = 0;  // collectives this rank has posted on this communicator
    uint64_t xchg_seq = 0;  // split/shrink rounds this rank has taken part in
    std::atomic<bool> aborted{false};
    std::atomic<bool> revoked{false};
    std::atomic<int> async_error{ncclSuccess};
    void* prof_ctx = nullptr;    // NCCL's profiler plugin's context for this communicator (fake_nccl_profiler.h)
    uint64_t prof_seq[16] = {};  // NCCL's comm->seqNumber[func]: collectives launched, per kind
};

enum class OpKind : uint8_t { Collective, Send, Recv, Join };

struct Op {
    OpKind kind = OpKind::Collective;
    Comm* comm = nullptr;
    const char* name = "";
    int peer = -1;                  // Send/Recv only
    uint64_t target = 0;            // set when posted: the counter value that completes it
    cudaStream_t stream = nullptr;  // collectives and p2p: where the fake libcuda gets the op's "kernel"
    size_t count = 0;
    size_t bytes = 0;                    // Send/Recv: count times the datatype's size
    static constexpr int kChannels = 2;  // NCCL channels the op "runs" on, each with a profiler KernelCh event
    void* channels[kChannels] = {};      // their event handles, once posted (nullptr again once stopped)
    void* coll_api = nullptr;  // v5: the plugin's handle for the op's CollApi (P2pApi) event, taken at the call
    uint64_t user_tag = 0;     // a Config call's userProfilerTag (2.31), for the v7 descriptors; 0: a plain call
};

// Settings read once from the environment: FAKE_NCCL_TIMEOUT_SEC (default 120, fractions allowed) and
// FAKE_NCCL_OP_DELAY_US (default 0).
struct Settings {
    double timeout_sec = 120.0;
    long op_delay_us = 0;
};
const Settings& settings();

// Records the message for ncclGetLastError and writes it to stderr as "fake-nccl: <message>". Returns `result`.
ncclResult_t report(ncclResult_t result, const std::string& message);
const char* last_error();

// With FAKE_NCCL_TRACE set (non-empty), writes "fake-nccl: <message>" to stderr: what a test cannot see from outside
// (the profiler table this NCCL took, the mask its plugin asked for, that a Config form was called). Not
// FAKE_NCCL_DEBUG: the linker would store "NCCL_DEBUG" as that string's tail, and the shim's environment probe, which
// must find NCCL_DEBUG among the library's own strings (known_env_names.cpp), would no longer see it.
void debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The Comm behind a handle, or nullptr (after report()) when it is NULL, destroyed or not ours.
Comm* from_handle(ncclComm_t handle, const char* fn);
inline ncclComm_t to_handle(Comm* c) { return reinterpret_cast<ncclComm_t>(c); }

// Fills `id` with random bytes.
ncclResult_t new_unique_id(ncclUniqueId* id);

// Attaches rank `rank` to the segment of `id` without waiting for the others.
ncclResult_t create_comm(const ncclUniqueId& id, int nranks, int rank, int device, bool nonblocking, Comm** out);

// create_comm + a Join operation (waits for all ranks to attach; deferred to ncclGroupEnd inside a group).
ncclResult_t init_rank(const ncclUniqueId& id, int nranks, int rank, bool nonblocking, ncclComm_t* out);

// ndev communicators in this process on one fresh segment.
ncclResult_t init_all(ncclComm_t* comms, int ndev, const int* devlist);

// Runs `op` now, or queues it when the calling thread is inside a group.
ncclResult_t submit(Op op);

ncclResult_t group_start();
ncclResult_t group_end();
// Ends the group like group_end but drops its operations instead of running them.
ncclResult_t group_simulate_end();

// Returns `r`; inside a group also remembers it, so that the outermost ncclGroupEnd fails without posting anything.
ncclResult_t group_error(ncclResult_t r);

// Collective over the parent: all ranks exchange (color, key) through the parent's segment.
ncclResult_t split(Comm* parent, int color, int key, const ncclConfig_t* config, ncclComm_t* newcomm);

// Collective over the parent ranks not in `exclude`.
ncclResult_t shrink(Comm* parent, const int* exclude, int exclude_count, const ncclConfig_t* config,
                    ncclComm_t* newcomm);

// A peer whose process is gone without destroying or aborting its communicator (killed, crashed, exited mid-job):
// the communicator goes into ncclRemoteError, which ncclCommGetAsyncError reports, as NCCL's socket transport does
// once the peer's connection drops. Operations already blocked stay blocked (a kernel waiting for data that never
// comes) until the communicator is aborted; new ones are refused.
void check_peers(Comm* c);

ncclResult_t abort_comm(Comm* c);
ncclResult_t revoke_comm(Comm* c);
ncclResult_t destroy_comm(Comm* c);

}  // namespace ncw::fake

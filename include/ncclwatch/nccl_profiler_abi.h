// NCCL's profiler-plugin interface, as far as ncclwatch uses it: our own declarations, written from the ABI of NCCL
// 2.26 to 2.31 (the structures' member order and types are the ABI; nothing here is copied from NCCL's headers).
// NCCL looks a plugin up by the symbol ncclProfiler_v<N> in the object NCCL_PROFILER_PLUGIN names (STATIC_PLUGIN:
// the objects already loaded) and tries the newest version it knows first: 2.26 knows v3, 2.27 v4, 2.28 v5, 2.29 and
// 2.30 v6, 2.31 v7.
//
// Only the members ncclwatch reads are declared; every union begins at the same 8-byte-aligned offset in NCCL's
// declaration and ours, so a member's offset is the same. The shim reads these structures and never writes them;
// the test NCCL (test/fake_nccl) fills them as NCCL does.
#pragma once

#include <cstddef>
#include <cstdint>

// The versions exported: NCW_PROFILER_VERSIONS in include/ncclwatch/api_table.h.
namespace ncw::prof {

using Result = int;  // ncclResult_t
using Logger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// Event types (the activation mask's bits and the descriptor's `type`).
enum : uint64_t {
    kGroup = 1u << 0,
    kColl = 1u << 1,
    kP2p = 1u << 2,
    kProxyOp = 1u << 3,
    kProxyStep = 1u << 4,
    kProxyCtrl = 1u << 5,
    kKernelCh = 1u << 6,
    kNetPlugin = 1u << 7,
    // v5+ (NCCL 2.28): events of the API calls themselves, started inside the call on the caller's thread. NCCL
    // starts them whenever any of Coll, P2p, ProxyOp, ProxyStep, KernelCh or NetPlugin is asked for, and passes the
    // handle a plugin returns for a CollApi (P2pApi) event back as its Coll's (P2p's) parent, wherever and whenever
    // that Coll starts: at launch, at the outermost ncclGroupEnd, on CUDA's host-callback thread, on a graph replay.
    kGroupApi = 1u << 8,
    kCollApi = 1u << 9,
    kP2pApi = 1u << 10,
    kKernelLaunch = 1u << 11,
    // v7 (NCCL 2.31): a kernel's barrier phases per channel; asking for it turns KernelCh on too.
    kKernelPhase = 1u << 15,
};

// Event states passed to recordEventState; only this one is looked at.
enum State : int { kKernelChStop = 22 };

// v3 (NCCL 2.26): the communicator is only known from the Coll and P2p descriptors; KernelCh has no GPU timer.
struct DescrV3 {
    uint8_t type;
    void* parent;
    int rank;
    union {
        struct {
            const char* name;
            uint64_t comm_hash;
            uint64_t seq;
            const char* func;
            const void* sendbuf;
            void* recvbuf;
            size_t count;
            int root;
            const char* datatype;
            uint8_t nchannels;  // nMaxChannels
            uint8_t nwarps;
            const char* algo;
            const char* proto;
        } coll;
        struct {
            const char* name;
            uint64_t comm_hash;
            const char* func;
            void* buf;
            const char* datatype;
            size_t count;
            int peer;
        } p2p;
        struct {
            uint8_t channel;
        } kernel_ch;
    };
};

// v4 (NCCL 2.27) and, with a 64-bit type, the parent-group members and the API events, v5 (2.28) and v6 (2.29; its
// further members are copy-engine events, which we do not ask for). Under v4 and older, a Coll's parent is its Group.
template <class TypeField>
struct DescrV4Like {
    TypeField type;
    void* parent;
    int rank;
    union {
        struct {
            uint64_t seq;  // per collective kind on the communicator (comm->seqNumber[func]), from 0
            const char* func;
            const void* sendbuf;
            void* recvbuf;
            size_t count;
            int root;
            const char* datatype;
            uint8_t nchannels;
            uint8_t nwarps;
            const char* algo;
            const char* proto;
            void* parent_group;  // v5+: the Group event (one per kernel launch, "plan") this Coll belongs to
        } coll;
        struct {
            const char* func;
            void* buf;
            const char* datatype;
            size_t count;
            int peer;
            uint8_t nchannels;
            void* parent_group;  // v5+
        } p2p;
        struct {
            uint8_t channel;
            uint64_t gpu_timer;  // the channel's start, GPU globaltimer (ns)
        } kernel_ch;
        struct {  // v5+
            bool graph_captured;
            int group_depth;
        } group_api;
        struct {  // v5+: inside ncclAllReduce & co, on the caller's thread
            const char* func;
            size_t count;
            const char* datatype;
            int root;
            void* stream;
            bool graph_captured;
        } coll_api;
        struct {  // v5+: inside each Send/Recv task's append (AlltoAll, Gather and Scatter make those too)
            const char* func;
            size_t count;
            const char* datatype;
            void* stream;
            bool graph_captured;
        } p2p_api;
    };
};
using DescrV4 = DescrV4Like<uint8_t>;
using DescrV5 = DescrV4Like<uint64_t>;

// v7 (NCCL 2.31): v6's union with a per-call user tag (ncclCollConfig_t::userProfilerTag) inside the API, Coll and
// P2p descriptors, the Coll's kernel variant, and a KernelPhase descriptor. Not v6 with members appended: a Coll's
// and a P2pApi's tails move, so v7 has a layout of its own.
struct DescrV7 {
    uint64_t type;
    void* parent;
    int rank;
    union {
        struct {
            uint64_t seq;
            const char* func;
            const void* sendbuf;
            void* recvbuf;
            size_t count;
            int root;
            const char* datatype;
            uint8_t nchannels;
            uint8_t nwarps;
            const char* algo;
            const char* proto;
            void* parent_group;
            const char* kernel_variant;
            bool is_sym_coll;
            uint64_t user_tag;
        } coll;
        struct {
            const char* func;
            void* buf;
            const char* datatype;
            size_t count;
            int peer;
            uint8_t nchannels;
            void* parent_group;
            uint64_t user_tag;
        } p2p;
        struct {
            uint8_t channel;
            uint64_t gpu_timer;
        } kernel_ch;
        struct {
            bool graph_captured;
            int group_depth;
        } group_api;
        struct {
            const char* func;
            size_t count;
            const char* datatype;
            int root;
            void* stream;
            bool graph_captured;
            uint64_t user_tag;
        } coll_api;
        struct {
            const char* func;
            size_t count;
            const char* datatype;
            void* stream;
            bool graph_captured;
            uint64_t user_tag;
        } p2p_api;
        struct {
            uint8_t channel;
            uint8_t phase;  // 0 initial sync, 1 compute, 2 final sync
            const char* phase_name;
            uint64_t gpu_timer;
        } kernel_phase;
    };
};

// recordEventState's arguments (v4+): for KernelChStop, the channel's stop on the GPU globaltimer.
union StateArgsV4 {
    struct {
        uint64_t gpu_timer;
    } kernel_ch;
    size_t pad[2];
};
using StateArgsV3 = StateArgsV4;  // v3 passes no timer; its args are never read

// The tables NCCL looks up. v3: init(ctx, mask); v4: init(ctx, mask, name, hash, nNodes, nranks, rank, log);
// v5 and v6: init(ctx, hash, mask, name, nNodes, nranks, rank, log).
struct TableV3 {
    const char* name;
    Result (*init)(void** ctx, int* mask);
    Result (*start_event)(void* ctx, void** handle, DescrV3* d);
    Result (*stop_event)(void* handle);
    Result (*record_state)(void* handle, int state, StateArgsV3* args);
    Result (*finalize)(void* ctx);
};
struct TableV4 {
    const char* name;
    Result (*init)(void** ctx, int* mask, const char* comm_name, uint64_t comm_hash, int nnodes, int nranks, int rank,
                   Logger log);
    Result (*start_event)(void* ctx, void** handle, DescrV4* d);
    Result (*stop_event)(void* handle);
    Result (*record_state)(void* handle, int state, StateArgsV4* args);
    Result (*finalize)(void* ctx);
};
struct TableV5 {
    const char* name;
    Result (*init)(void** ctx, uint64_t comm_hash, int* mask, const char* comm_name, int nnodes, int nranks, int rank,
                   Logger log);
    Result (*start_event)(void* ctx, void** handle, DescrV5* d);
    Result (*stop_event)(void* handle);
    Result (*record_state)(void* handle, int state, StateArgsV4* args);
    Result (*finalize)(void* ctx);
};
using TableV6 = TableV5;  // the same functions; the descriptor only gains members we do not read
struct TableV7 {
    const char* name;
    Result (*init)(void** ctx, uint64_t comm_hash, int* mask, const char* comm_name, int nnodes, int nranks, int rank,
                   Logger log);
    Result (*start_event)(void* ctx, void** handle, DescrV7* d);
    Result (*stop_event)(void* handle);
    Result (*record_state)(void* handle, int state, StateArgsV4* args);
    Result (*finalize)(void* ctx);
};

static_assert(offsetof(DescrV3, coll) == 24 && offsetof(DescrV4, coll) == 24 && offsetof(DescrV5, coll) == 24);
static_assert(offsetof(DescrV4, kernel_ch.gpu_timer) == 32);
static_assert(offsetof(DescrV5, coll.nchannels) == 80 && offsetof(DescrV5, coll.algo) == 88 &&
              offsetof(DescrV5, coll.parent_group) == 104);
static_assert(offsetof(DescrV5, group_api.group_depth) == 28 && offsetof(DescrV5, coll_api.count) == 32 &&
              offsetof(DescrV5, coll_api.graph_captured) == 64 && offsetof(DescrV5, p2p_api.graph_captured) == 56);
static_assert(offsetof(DescrV7, coll) == 24 && offsetof(DescrV7, coll.parent_group) == 104 &&
              offsetof(DescrV7, coll.kernel_variant) == 112 && offsetof(DescrV7, coll.user_tag) == 128 &&
              offsetof(DescrV7, p2p.user_tag) == 72 && offsetof(DescrV7, coll_api.user_tag) == 72 &&
              offsetof(DescrV7, p2p_api.user_tag) == 64 && offsetof(DescrV7, kernel_ch.gpu_timer) == 32);

}  // namespace ncw::prof

#include "fake_nccl_profiler.h"

#include <dlfcn.h>
#include <strings.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "fake_nccl_comm.h"
#include "fake_nccl_version.h"
#include "ncclwatch/nccl_profiler_abi.h"

namespace ncw::fake {

namespace {

struct Plugin {
    int version = 0;  // 0: none
    const prof::TableV3* v3 = nullptr;
    const prof::TableV4* v4 = nullptr;
    const prof::TableV5* v5 = nullptr;  // v5, and v6: the same functions over the same descriptor members
    const prof::TableV7* v7 = nullptr;
};

Plugin load_plugin() {
    Plugin p;
    const int code = version_code();
    char nccl[32];
    snprintf(nccl, sizeof nccl, "NCCL %d.%d.%d (%d)", code / 10000, code / 100 % 100, code % 100, code);
    int newest = newest_profiler_version(code);
    if (const char* v = getenv("FAKE_NCCL_PROFILER_VERSION")) newest = std::min(newest, atoi(v));
    if (newest < 3) {
        debug("%s: looks up no profiler plugin", nccl);
        return p;
    }
    const char* name = getenv("NCCL_PROFILER_PLUGIN");
    if (!name || !*name || strcasecmp(name, "none") == 0) return p;
    // As NCCL's tryOpenLib: STATIC_PLUGIN (any prefix of it, case-insensitive) opens the objects already loaded.
    void* lib = strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0 ? dlopen(nullptr, RTLD_NOW | RTLD_LOCAL)
                                                                      : dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return p;
    for (int v = newest; v >= 3 && !p.version; --v) {
        const std::string table = "ncclProfiler_v" + std::to_string(v);
        const void* t = dlsym(lib, table.c_str());
        if (!t) continue;
        p.version = v;
        if (v == 7) p.v7 = static_cast<const prof::TableV7*>(t);
        if (v == 5 || v == 6) p.v5 = static_cast<const prof::TableV5*>(t);
        if (v == 4) p.v4 = static_cast<const prof::TableV4*>(t);
        if (v == 3) p.v3 = static_cast<const prof::TableV3*>(t);
    }
    if (p.version)
        debug("%s: profiler plugin v%d found in %s (looked up from v%d)", nccl, p.version, name, newest);
    else
        debug("%s: no ncclProfiler_v%d..v3 in %s", nccl, newest, name);
    return p;
}

const Plugin& plugin() {
    static const Plugin p = load_plugin();
    return p;
}

int g_mask = 0;  // process-wide, as in NCCL: the last init's

uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint32_t kind_index(const char* name) {
    static const char* const kinds[] = {
        "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv",
        "Send",      "Recv",   "AlltoAll",  "Scatter",       "Gather"};  // ncclFunc_t order
    for (uint32_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); ++i)
        if (strcmp(name, kinds[i]) == 0) return i;
    return 15;
}

const char* algo() {
    static const char* a = [] {
        const char* v = getenv("FAKE_NCCL_ALGO");
        return v && *v ? v : "RING";
    }();
    return a;
}

// FAKE_NCCL_PROFILER_WITHHOLD: the collectives that get no Coll (nor Group, nor KernelCh) event.
struct Withhold {
    bool all = false;
    std::set<uint64_t> seqs;  // the communicator's collective numbers (1-based)
};
const Withhold& withhold() {
    static const Withhold w = [] {
        Withhold v;
        const char* e = getenv("FAKE_NCCL_PROFILER_WITHHOLD");
        if (!e || !*e) return v;
        if (strcmp(e, "all") == 0) {
            v.all = true;
            return v;
        }
        for (const char* p = e; *p;) {
            char* end = nullptr;
            const unsigned long long n = strtoull(p, &end, 10);
            if (end == p) {
                fprintf(stderr, "fake-nccl: FAKE_NCCL_PROFILER_WITHHOLD=%s: want \"all\" or numbers, comma-separated\n",
                        e);
                abort();
            }
            v.seqs.insert(n);
            p = *end == ',' ? end + 1 : end;
        }
        return v;
    }();
    return w;
}
bool withheld(const Op& op) {
    const Withhold& w = withhold();
    return op.kind == OpKind::Collective && (w.all || w.seqs.count(op.target) != 0);
}

// A tree leaf's thread 0 is done once its data went up (FAKE_NCCL_ALGO=TREE).
bool early_stop(const Comm* c) { return strcmp(algo(), "TREE") == 0 && 2 * c->rank + 1 >= c->nranks; }

template <class Descr>
constexpr bool kV7 = std::is_same_v<Descr, prof::DescrV7>;

template <class Descr>
void fill_coll(Descr& d, const Op& op, uint64_t seq) {
    d.type = decltype(d.type)(prof::kColl);
    d.rank = op.comm->rank;
    d.coll.seq = seq;
    d.coll.func = op.name;
    d.coll.count = op.count;
    d.coll.root = 0;
    d.coll.datatype = "float32";
    d.coll.nchannels = Op::kChannels;
    d.coll.algo = algo();
    d.coll.proto = "LL";
    if constexpr (kV7<Descr>) {
        d.coll.kernel_variant = "ncclDevKernel_Generic";  // the kernel's name; never a symmetric one here
        d.coll.is_sym_coll = false;
        d.coll.user_tag = op.user_tag;
    }
}

// The table of the plugin's version, given only the descriptor of that version (v6 takes v5's): a caller that built
// another layout sends nothing, which the tests of each version see.
template <class Descr>
void start_event(void* ctx, void** handle, Descr* d) {
    const Plugin& p = plugin();
    if constexpr (kV7<Descr>) {
        if (p.version == 7) p.v7->start_event(ctx, handle, d);
    } else if constexpr (std::is_same_v<Descr, prof::DescrV5>) {
        if (p.version == 5 || p.version == 6) p.v5->start_event(ctx, handle, d);
    } else if constexpr (std::is_same_v<Descr, prof::DescrV4>) {
        if (p.version == 4) p.v4->start_event(ctx, handle, d);
    } else {
        static_assert(std::is_same_v<Descr, prof::DescrV3>);
        if (p.version == 3) p.v3->start_event(ctx, handle, d);
    }
}

void stop_event(void* handle) {
    const Plugin& p = plugin();
    if (!handle) return;
    if (p.version == 7) p.v7->stop_event(handle);
    if (p.version == 5 || p.version == 6) p.v5->stop_event(handle);
    if (p.version == 4) p.v4->stop_event(handle);
    if (p.version == 3) p.v3->stop_event(handle);
}

}  // namespace

void profiler_init_comm(Comm* c) {
    const Plugin& p = plugin();
    if (!p.version) return;
    int mask = 0;
    uint64_t hash = 0;
    memcpy(&hash, c->id.internal, sizeof(hash));
    if (p.version == 7) p.v7->init(&c->prof_ctx, hash, &mask, nullptr, 1, c->nranks, c->rank, nullptr);
    if (p.version == 5 || p.version == 6)
        p.v5->init(&c->prof_ctx, hash, &mask, nullptr, 1, c->nranks, c->rank, nullptr);
    if (p.version == 4) p.v4->init(&c->prof_ctx, &mask, nullptr, hash, 1, c->nranks, c->rank, nullptr);
    if (p.version == 3) p.v3->init(&c->prof_ctx, &mask);
    __atomic_store_n(&g_mask, mask, __ATOMIC_RELAXED);
    debug("rank %d: profiler plugin v%d init: event mask 0x%x", c->rank, p.version, unsigned(mask));
}

namespace {

// v5+: an API event inside the call (CollApi, or P2pApi for a send or receive), in the plugin's descriptor.
template <class Descr>
void* api_event(Comm* c, bool p2p, const char* name, size_t count, void* stream, uint64_t user_tag) {
    Descr d{};
    d.type = p2p ? prof::kP2pApi : prof::kCollApi;
    d.rank = c->rank;
    if (p2p) {
        d.p2p_api.func = name;
        d.p2p_api.count = count;
        d.p2p_api.datatype = "ncclFloat32";
        d.p2p_api.stream = stream;
        if constexpr (kV7<Descr>) d.p2p_api.user_tag = user_tag;
    } else {
        d.coll_api.func = name;
        d.coll_api.count = count;
        d.coll_api.datatype = "ncclFloat32";
        d.coll_api.stream = stream;
        if constexpr (kV7<Descr>) d.coll_api.user_tag = user_tag;
    }
    void* h = nullptr;
    start_event(c->prof_ctx, &h, &d);
    stop_event(h);  // NCCL stops it once the task is queued; the handle lives on in the task
    return h;
}

// nullptr when none is asked for.
void* api_event(Comm* c, bool p2p, const char* name, size_t count, void* stream, uint64_t user_tag) {
    const Plugin& p = plugin();
    const int mask = __atomic_load_n(&g_mask, __ATOMIC_RELAXED);
    if (p.version < 5 || !c->prof_ctx || !(mask & ((p2p ? prof::kP2p : prof::kColl) | prof::kKernelCh))) return nullptr;
    if (c->nranks == 1) return nullptr;  // as NCCL (ncclLaunchOneRank): a one-rank op is a local copy, no hook
    return p.version == 7 ? api_event<prof::DescrV7>(c, p2p, name, count, stream, user_tag)
                          : api_event<prof::DescrV5>(c, p2p, name, count, stream, user_tag);
}

}  // namespace

void* profiler_coll_api(Comm* c, const char* name, size_t count, void* stream, uint64_t user_tag) {
    return api_event(c, false, name, count, stream, user_tag);
}
void* profiler_p2p_api(Comm* c, const char* name, size_t count, void* stream) {
    return api_event(c, true, name, count, stream, 0);  // NCCL 2.31 has no Config form of a send or receive
}

static void stop_channel(void* h) {
    const Plugin& p = plugin();
    prof::StateArgsV4 a{};
    a.kernel_ch.gpu_timer = mono_ns() + kFakeGpuTimerOffsetNs;
    if (p.version == 7) p.v7->record_state(h, prof::kKernelChStop, &a);
    if (p.version == 5 || p.version == 6) p.v5->record_state(h, prof::kKernelChStop, &a);
    if (p.version == 4) p.v4->record_state(h, prof::kKernelChStop, &a);
    if (p.version == 3) p.v3->record_state(h, prof::kKernelChStop, nullptr);
    stop_event(h);
}

namespace {

// v5+: a send's or receive's P2p event, or a collective's launch Group and its Coll under it and under the call's
// CollApi. Returns the Coll's (P2p's) handle.
template <class Descr>
void* start_op_v5like(const Op& op, uint64_t seq, bool p2p) {
    Comm* c = op.comm;
    void* coll = nullptr;
    if (p2p) {
        // No Group (launch) event: the fake posts a group's sends and receives one by one, and a later "launch"
        // would claim the earlier ones done. Their ends are their channels' stops.
        Descr d{};
        d.type = prof::kP2p;
        d.rank = c->rank;
        d.parent = op.coll_api;
        d.p2p.func = op.name;
        d.p2p.count = op.count;
        d.p2p.datatype = "float32";
        d.p2p.peer = op.peer;
        d.p2p.nchannels = Op::kChannels;
        if constexpr (kV7<Descr>) d.p2p.user_tag = op.user_tag;
        start_event(c->prof_ctx, &coll, &d);
        return coll;
    }
    Descr g{};
    g.type = prof::kGroup;
    g.rank = c->rank;
    void* group = nullptr;
    start_event(c->prof_ctx, &group, &g);
    Descr d{};
    fill_coll(d, op, seq);
    d.parent = op.coll_api;
    d.coll.parent_group = group;
    start_event(c->prof_ctx, &coll, &d);
    stop_event(group);
    return coll;
}

// A KernelCh event per channel, under the op's Coll (P2p), with its GPU start (v4+).
template <class Descr>
void start_channels(Op& op, void* coll) {
    for (int ch = 0; ch < Op::kChannels; ++ch) {
        op.channels[ch] = nullptr;
        Descr d{};
        d.type = decltype(d.type)(prof::kKernelCh);
        d.parent = coll;
        d.kernel_ch.channel = uint8_t(ch);
        if constexpr (!std::is_same_v<Descr, prof::DescrV3>) d.kernel_ch.gpu_timer = mono_ns() + kFakeGpuTimerOffsetNs;
        start_event(op.comm->prof_ctx, &op.channels[ch], &d);
    }
}

}  // namespace

void profiler_op_posted(Op& op) {
    const Plugin& p = plugin();
    Comm* c = op.comm;
    const int mask = __atomic_load_n(&g_mask, __ATOMIC_RELAXED);
    if (op.kind != OpKind::Collective && op.kind != OpKind::Send && op.kind != OpKind::Recv) return;
    const bool p2p = op.kind != OpKind::Collective;
    const uint64_t seq = p2p ? 0 : c->prof_seq[kind_index(op.name)]++;  // NCCL counts even without a plugin
    if (!p.version || !c->prof_ctx || !(mask & (p2p ? prof::kP2p : prof::kColl)) || c->nranks == 1) return;
    if (p2p && p.version < 5) return;  // the fake's older tables send no P2p events (ours would not use them)
    if (withheld(op)) return;          // as NCCL 2.28's symmetric kernels: its CollApi, and nothing after it
    void* coll = nullptr;
    if (p.version == 7) {
        coll = start_op_v5like<prof::DescrV7>(op, seq, p2p);
    } else if (p.version >= 5) {
        coll = start_op_v5like<prof::DescrV5>(op, seq, p2p);
    } else if (p.version == 3) {
        prof::DescrV3 d{};
        d.type = uint8_t(prof::kColl);
        d.rank = c->rank;
        d.coll.seq = seq;
        d.coll.func = op.name;
        d.coll.count = op.count;
        d.coll.nchannels = Op::kChannels;
        d.coll.algo = algo();
        start_event(c->prof_ctx, &coll, &d);
    } else {
        prof::DescrV4 d{};
        fill_coll(d, op, seq);
        start_event(c->prof_ctx, &coll, &d);
    }
    stop_event(coll);  // "enqueued"
    if (!coll || !(mask & prof::kKernelCh)) return;
    if (p.version == 7) start_channels<prof::DescrV7>(op, coll);
    if (p.version == 5 || p.version == 6) start_channels<prof::DescrV5>(op, coll);
    if (p.version == 4) start_channels<prof::DescrV4>(op, coll);
    if (p.version == 3) start_channels<prof::DescrV3>(op, coll);
    if (!p2p && early_stop(c))
        for (void*& h : op.channels)
            if (h) stop_channel(std::exchange(h, nullptr));
}

void profiler_op_done(const Op& op) {
    for (void* h : op.channels)
        if (h) stop_channel(h);
}

void profiler_finalize_comm(Comm* c) {
    const Plugin& p = plugin();
    if (!p.version || !c->prof_ctx) return;
    if (p.version == 7) p.v7->finalize(c->prof_ctx);
    if (p.version == 5 || p.version == 6) p.v5->finalize(c->prof_ctx);
    if (p.version == 4) p.v4->finalize(c->prof_ctx);
    if (p.version == 3) p.v3->finalize(c->prof_ctx);
    c->prof_ctx = nullptr;
}

}  // namespace ncw::fake

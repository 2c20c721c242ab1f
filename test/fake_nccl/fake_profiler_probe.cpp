// A profiler plugin that records what the test NCCL gives it, for fake_nccl_versions_selftest: which table NCCL took
// (its init), and each event's type, function and user tag, read from the descriptor of that table's version. Built
// twice (meson.build): with every table the shim exports (v3 to v7), and with v3 and v4 alone (PROBE_NEWEST=4), a
// plugin older than the NCCL, which NCCL must fall back through.
#include "fake_profiler_probe.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ncclwatch/nccl_profiler_abi.h"

#ifndef PROBE_NEWEST
#error "PROBE_NEWEST: the newest table this plugin exports"
#endif

namespace {

using namespace ncw;
using fake::ProbeEvent;
using fake::ProbeLog;

ProbeLog g_log;

// What this probe asks for: every event the shim reads.
constexpr uint64_t kMask =
    prof::kGroup | prof::kColl | prof::kP2p | prof::kKernelCh | prof::kGroupApi | prof::kCollApi | prof::kP2pApi;

int g_ctx;  // the context NCCL passes back; its value says nothing
int g_handle;

void note(int table, uint64_t type, const char* func, uint64_t tag, bool kernel_variant) {
    if (g_log.events >= int(sizeof g_log.ev / sizeof g_log.ev[0])) return;
    ProbeEvent& e = g_log.ev[g_log.events++];
    e.table = table;
    e.type = type;
    std::strncpy(e.func, func ? func : "", sizeof e.func - 1);
    e.user_tag = tag;
    e.kernel_variant = kernel_variant;
}

prof::Result init_common(int version, void** ctx, int* mask) {
    g_log.init_version = version;
    ++g_log.inits;
    *ctx = &g_ctx;
    *mask = int(kMask);
    return 0;
}

template <class Descr>
const char* func_of(const Descr* d) {
    if (d->type == prof::kColl) return d->coll.func;
    if constexpr (!std::is_same_v<Descr, prof::DescrV3>) {
        if (d->type == prof::kP2p) return d->p2p.func;
    }
    if constexpr (!std::is_same_v<Descr, prof::DescrV3> && !std::is_same_v<Descr, prof::DescrV4>) {
        if (d->type == prof::kCollApi) return d->coll_api.func;
        if (d->type == prof::kP2pApi) return d->p2p_api.func;
    }
    return nullptr;
}

template <int V, class Descr>
prof::Result start(void*, void** handle, Descr* d) {
    uint64_t tag = 0;
    bool variant = false;
    if constexpr (V == 7) {
        if (d->type == prof::kColl) tag = d->coll.user_tag, variant = d->coll.kernel_variant != nullptr;
        if (d->type == prof::kP2p) tag = d->p2p.user_tag;
        if (d->type == prof::kCollApi) tag = d->coll_api.user_tag;
        if (d->type == prof::kP2pApi) tag = d->p2p_api.user_tag;
    }
    note(V, uint64_t(d->type), func_of(d), tag, variant);
    *handle = &g_handle;
    return 0;
}

prof::Result stop(void*) { return 0; }
template <class Args>
prof::Result record(void*, int, Args*) {
    return 0;
}
prof::Result finalize(void*) { return 0; }

prof::Result init_v3(void** ctx, int* mask) { return init_common(3, ctx, mask); }
prof::Result init_v4(void** ctx, int* mask, const char*, uint64_t, int, int, int, prof::Logger) {
    return init_common(4, ctx, mask);
}
template <int V>
prof::Result init_v5(void** ctx, uint64_t, int* mask, const char*, int, int, int, prof::Logger) {
    return init_common(V, ctx, mask);
}

}  // namespace

#define PROBE_EXPORT __attribute__((visibility("default")))

extern "C" {

PROBE_EXPORT ncw::prof::TableV3 ncclProfiler_v3 = {
    "probe", init_v3, start<3, ncw::prof::DescrV3>, stop, record<ncw::prof::StateArgsV3>, finalize};
PROBE_EXPORT ncw::prof::TableV4 ncclProfiler_v4 = {
    "probe", init_v4, start<4, ncw::prof::DescrV4>, stop, record<ncw::prof::StateArgsV4>, finalize};
#if PROBE_NEWEST >= 5
PROBE_EXPORT ncw::prof::TableV5 ncclProfiler_v5 = {
    "probe", init_v5<5>, start<5, ncw::prof::DescrV5>, stop, record<ncw::prof::StateArgsV4>, finalize};
// v6 reads v5's descriptor: its members are v5's, in v5's places.
PROBE_EXPORT ncw::prof::TableV6 ncclProfiler_v6 = {
    "probe", init_v5<6>, start<6, ncw::prof::DescrV5>, stop, record<ncw::prof::StateArgsV4>, finalize};
PROBE_EXPORT ncw::prof::TableV7 ncclProfiler_v7 = {
    "probe", init_v5<7>, start<7, ncw::prof::DescrV7>, stop, record<ncw::prof::StateArgsV4>, finalize};
#endif

// The record, for the test that loaded this plugin through NCCL.
PROBE_EXPORT const ncw::fake::ProbeLog* fake_profiler_probe_log() { return &g_log; }
}

// The one per-variant object of the test NCCL: its NCCL_VERSION_CODE (meson.build compiles it once per variant with
// -DFAKE_NCCL_VERSION_CODE=N).
#include "fake_nccl_version.h"

#ifndef FAKE_NCCL_VERSION_CODE
#error "FAKE_NCCL_VERSION_CODE must name the NCCL version this variant presents (meson.build)"
#endif

namespace {

// A few of the NCCL_* names each version added to what NCCL reads (NCCL_PARAM and ncclGetEnv in its sources, from
// the public repository's tags), embedded as the real library embeds them: the shim's scan of each variant then
// finds what that version reads, and a later version's variable set on an older one is flagged as unread.
__attribute__((used)) const char* const kVersionEnvNames[] = {
#if FAKE_NCCL_VERSION_CODE >= 22800
    "NCCL_CTA_POLICY",
    "NCCL_WIN_ENABLE",
    "NCCL_SYM_CTAS",
#endif
#if FAKE_NCCL_VERSION_CODE >= 22900
    "NCCL_NUM_RMA_CTX",
    "NCCL_SYM_GIN_KERNELS_ENABLE",
    "NCCL_GIN_NCONNECTIONS",
#endif
#if FAKE_NCCL_VERSION_CODE >= 23000
    "NCCL_RMA_DISABLE",
    "NCCL_P2P_MAX_PEERS",
    "NCCL_GRAPH_STREAM_ORDERING",
#endif
#if FAKE_NCCL_VERSION_CODE >= 23100
    "NCCL_SYM_KERNEL_ID",
    "NCCL_GIN_PROXY_POLL_BATCH",
#endif
#if FAKE_NCCL_VERSION_CODE >= 23200
    "NCCL_HIER_CE_COLL_AG_RAIL_RING_ENABLE",
#endif
    nullptr};

}  // namespace

namespace ncw::fake {

int version_code() { return FAKE_NCCL_VERSION_CODE; }

}  // namespace ncw::fake

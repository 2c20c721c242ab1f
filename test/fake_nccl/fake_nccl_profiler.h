// NCCL's profiler-plugin interface, as the fake NCCL drives it (include/ncclwatch/nccl_profiler_abi.h): the plugin is
// found as NCCL 2.26 and later find it (NCCL_PROFILER_PLUGIN: a path, or STATIC_PLUGIN for the objects already loaded;
// unset: libnccl-profiler.so, which does not exist here), newest table first, from the newest this NCCL knows
// (fake_nccl_version.h: 2.26 v3, 2.28 v5, 2.29 v6, 2.31 and 2.32 v7; 2.21 looks up none).
// FAKE_NCCL_PROFILER_VERSION=N caps the newest it looks up (3 on the 2.28 variant: it behaves as NCCL 2.26 does).
// Each table gets its version's descriptors: v3 and v4 their own, v5 and v6 the v5 layout (v6 only adds copy-engine
// events), v7 its own (a Config call's userProfilerTag in the CollApi and Coll descriptors, the Coll's kernel variant).
// FAKE_NCCL_TRACE (non-empty) says on stderr which table was found and each init's event mask ("fake-nccl: ...").
//
// Per collective, as NCCL does: v5+ (2.28) a CollApi event inside the API call, on the caller's thread, whose handle
// becomes the Coll's parent, and a Group event per launch (each posted op here), the Coll's parent group; a Coll event
// at its launch (per-kind sequence number, count, two channels, the algorithm), stopped at once ("enqueued"); one
// KernelCh event per channel when its "kernel" starts (here: when posted), with a GPU globaltimer stamp (our
// monotonic clock plus a large offset, so that a plugin must convert it), and their stop when the operation
// completes. An operation that never completes never stops its channels, as on a GPU. Sends and receives (v5+ only:
// older tables name no op in them) the same way: a P2pApi event inside the call, a P2p event (its parent the
// P2pApi's handle, no sequence number) at its launch, and its channels.
//
// FAKE_NCCL_PROFILER_WITHHOLD names collectives that get their CollApi event inside the call (v5+), as every other,
// but no Coll event, no Group event and no KernelCh events, as NCCL 2.28 does for the collectives it runs as symmetric
// kernels: "all" (every collective), or the numbers of collectives on their communicator, comma-separated ("5,9": the
// 5th and the 9th collective each communicator posts, counted from 1 as the fake's op numbers, "AllReduce #9"; sends
// and receives are never withheld). The op itself runs as any other (its kernel is enqueued on its stream with the
// fake libcuda). A value that is neither aborts the process.
//
// FAKE_NCCL_ALGO=TREE (default RING) says the collectives run as NCCL's tree: on a leaf (rank r with 2r+1 >= nranks),
// thread 0 only sends its data up, so its channels stop a few microseconds after they start, whatever the peers do,
// as NCCL's KernelCh stops of a real tree leaf do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncw::fake {

struct Comm;
struct Op;

void profiler_init_comm(Comm* c);  // at communicator creation, on the creating thread
// v5+: the CollApi event of a collective's call (nullptr: none); its handle goes with the op. user_tag: a Config
// call's userProfilerTag (0 for a plain call), which v7 passes on.
void* profiler_coll_api(Comm* c, const char* name, size_t count, void* stream, uint64_t user_tag);
// v5+: the P2pApi event of a send's or receive's call (nullptr: none); its handle goes with the op.
void* profiler_p2p_api(Comm* c, const char* name, size_t count, void* stream);
void profiler_op_posted(Op& op);       // a collective, send or receive was posted (its kernel "starts")
void profiler_op_done(const Op& op);   // it completed
void profiler_finalize_comm(Comm* c);  // at destroy

inline constexpr uint64_t kFakeGpuTimerOffsetNs = 1000000000000ull;  // 1000 s ahead of CLOCK_MONOTONIC

}  // namespace ncw::fake

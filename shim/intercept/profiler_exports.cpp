// The tables NCCL looks up by name in its profiler plugin (nccl_profiler_abi.h): NCCL 2.26 takes v3, 2.27 v4, 2.28
// v5, 2.29 and 2.30 v6, 2.31 v7, each the newest it knows. They live in the shared library itself (not the static
// core) so that the linker keeps them, and the version script exports them (exports.map.h).
#include "ncclwatch/nccl_profiler_abi.h"
#include "shim/complete/profiler_plugin.h"

#define NCW_EXPORT __attribute__((visibility("default")))

using namespace ncw;

extern "C" {
NCW_EXPORT prof::TableV3 ncclProfiler_v3 = {"ncclwatch", prof_cb::init_v3, prof_cb::start_v3, prof_cb::stop,
                                            prof_cb::record_v3, prof_cb::finalize};
NCW_EXPORT prof::TableV4 ncclProfiler_v4 = {"ncclwatch", prof_cb::init_v4, prof_cb::start_v4, prof_cb::stop,
                                            prof_cb::record_v4, prof_cb::finalize};
NCW_EXPORT prof::TableV5 ncclProfiler_v5 = {"ncclwatch", prof_cb::init_v5, prof_cb::start_v5, prof_cb::stop,
                                            prof_cb::record_v4, prof_cb::finalize};
// v6's descriptor begins with v5's members, in v5's places (its additions are copy-engine events we do not ask for).
NCW_EXPORT prof::TableV6 ncclProfiler_v6 = {"ncclwatch", prof_cb::init_v5, prof_cb::start_v5, prof_cb::stop,
                                            prof_cb::record_v4, prof_cb::finalize};
// v7 moves the tails of the descriptors we read (a per-call user tag): its own layout. Its KernelPhase events are not
// asked for: they turn on NCCL's phase writes and their fence, a cost our positions do not need.
NCW_EXPORT prof::TableV7 ncclProfiler_v7 = {"ncclwatch", prof_cb::init_v7, prof_cb::start_v7, prof_cb::stop,
                                            prof_cb::record_v4, prof_cb::finalize};
}

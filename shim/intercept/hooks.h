// Hand-written hooks for the NCW_NCCL_HOOKED part of the API table (include/ncclwatch/api_table.h): groups,
// communicator lifecycle and one-sided calls. Each calls the real function exactly once through `real` and returns its
// result. The declarations come from the table, so a hook's parameters are the wrapped function's:
// shim/intercept/hooks.cpp (the lifecycle) and group_hooks.cpp (the groups) define ncclResult_t <name>(CallScope& s,
// <the function's parameters>) for every row.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "ncclwatch/api_table.h"
#include "ncclwatch/nccl_newer_api.h"
#include "shim/record/call_scope.h"

namespace ncw {

struct Runtime;

// The ops this thread gathered (ThreadState::group_ops, recorded at their calls) launched together by `launch(arg)`:
// the outermost ncclGroupEnd's real call (group_hooks.cpp), or a CUDA graph launch that replays captured ops
// (graph_hooks.cpp). Returns what `launch` returned; the ops are completed or followed as one launch.
ncclResult_t launch_gathered(CallScope& s, Runtime& rt, ThreadState& ts, ncclResult_t (*launch)(void*), void* arg);

// The CUDA runtime's calls (NCW_CUDART_HOOKED: the graph calls in graph_hooks.cpp, the synchronisations, events and
// stream waits in sync_hooks.cpp), each with the wrapped function's parameters.
namespace cudart_hook {
#define NCW_CUDART_HOOK_DECL(name, params, args) int name params;
NCW_CUDART_HOOKED(NCW_CUDART_HOOK_DECL)
#undef NCW_CUDART_HOOK_DECL
}  // namespace cudart_hook

}  // namespace ncw

namespace ncw::hook {

#define NCW_HOOK_PARAMS(...) CallScope& s __VA_OPT__(, ) __VA_ARGS__
#define NCW_HOOK_DECL(name, since, params, args) ncclResult_t name(NCW_HOOK_PARAMS params);
NCW_NCCL_HOOKED(NCW_HOOK_DECL)
#undef NCW_HOOK_DECL
#undef NCW_HOOK_PARAMS

}  // namespace ncw::hook

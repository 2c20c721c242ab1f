// Hand-written hooks for the NCW_NCCL_HOOKED part of the API table (include/ncclwatch/api_table.h): groups and
// communicator lifecycle. Each calls the real function exactly once through `real` and returns its result. The
// declarations come from the table, so a hook's parameters are the wrapped function's: shim/intercept/hooks.cpp (the
// lifecycle) and group_hooks.cpp (the groups) define ncclResult_t <name>(CallScope& s, <the function's parameters>)
// for every row.
#pragma once

#include <nccl.h>

#include "ncclwatch/api_table.h"
#include "shim/record/call_scope.h"

namespace ncw::hook {

#define NCW_HOOK_PARAMS(...) CallScope& s __VA_OPT__(, ) __VA_ARGS__
#define NCW_HOOK_DECL(name, params, args) ncclResult_t name(NCW_HOOK_PARAMS params);
NCW_NCCL_HOOKED(NCW_HOOK_DECL)
#undef NCW_HOOK_DECL
#undef NCW_HOOK_PARAMS

}  // namespace ncw::hook

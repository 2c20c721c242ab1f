/* Preprocessed into the linker version script: the exported symbols are exactly the API table's wrappers (NCCL's,
   and the CUDA runtime's graph calls), NCCL's profiler-plugin tables, _exit/_Exit, ncclwatch_note_exception and ncclwatch_note_torch_timeout. */
#include "ncclwatch/api_table.h"
// clang-format off
#define NCW_EXPORT_OP(name, since, params, args, desc) name;
#define NCW_EXPORT_CONFIG_OP(name, since, plain, params, args, plain_args, desc) name;
#define NCW_EXPORT_HOOKED(name, since, params, args) name;
#define NCW_EXPORT_PROFILER(v) ncclProfiler_v##v;
#define NCW_EXPORT_CUDART(name, params, args) name;
{
  global:
    NCW_NCCL_OPS(NCW_EXPORT_OP)
    NCW_NCCL_CONFIG_OPS(NCW_EXPORT_CONFIG_OP)
    NCW_NCCL_HOOKED(NCW_EXPORT_HOOKED)
    NCW_PROFILER_VERSIONS(NCW_EXPORT_PROFILER)
    /* CUDA graph launches of captured NCCL ops (graph_hooks.cpp). */
    NCW_CUDART_HOOKED(NCW_EXPORT_CUDART)
    /* How the process ended (process_end.cpp): recorded, then the real one; and its last words (an uncaught
       Python exception, from the launcher's hook). */
    _exit; _Exit; ncclwatch_note_exception;
    /* The timeout of a torch process group (from the launcher's hook). */
    ncclwatch_note_torch_timeout;
  local: *;
};
// clang-format on

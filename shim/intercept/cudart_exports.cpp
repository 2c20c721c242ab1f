// The exported CUDA runtime graph calls (api_table.h: NCW_CUDART_HOOKED), each its hook (cudart_hooks.cpp). A unit of
// its own: the runtime's header (which nccl.h includes) declares these names with its own types, ours are the ABI's.
#include <cstdint>

#include "ncclwatch/api_table.h"

typedef struct CUstream_st* cudaStream_t;  // the runtime's, as nccl.h has it

namespace ncw::cudart_hook {
#define NCW_CUDART_HOOK_DECL(name, params, args) int name params;
NCW_CUDART_HOOKED(NCW_CUDART_HOOK_DECL)
#undef NCW_CUDART_HOOK_DECL
}  // namespace ncw::cudart_hook

#define NCW_CUDART_WRAPPER(name, params, args) \
    extern "C" __attribute__((visibility("default"))) int name params { return ::ncw::cudart_hook::name args; }
NCW_CUDART_HOOKED(NCW_CUDART_WRAPPER)

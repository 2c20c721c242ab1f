// The real CUDA runtime functions behind our NCW_CUDART_HOOKED hooks (graph_hooks.cpp, sync_hooks.cpp): the next
// definition after ours (the libcudart the program links), else a libcudart already loaded (RTLD_NOLOAD: never a second
// one). Each is found once; a miss is logged once, and its hook answers kCudaErrorUnknown.
#pragma once

#include <atomic>

#include "ncclwatch/api_table.h"
#include "shim/record/call_scope.h"

typedef struct CUstream_st* cudaStream_t;  // the runtime's, as nccl.h has it

namespace ncw {

inline constexpr int kCudaErrorUnknown = 999;  // cudaErrorUnknown: the one answer when the real runtime is not found

struct CudartFn {
    const char* name;
    std::atomic<void*> ptr{nullptr};
};

void* resolve_cudart(CudartFn& fn);

namespace real_cudart {
#define NCW_REAL_CUDART_DECL(name, params, args) extern CudartFn name;
NCW_CUDART_HOOKED(NCW_REAL_CUDART_DECL)
#undef NCW_REAL_CUDART_DECL
}  // namespace real_cudart

// The real function as type Fn (nullptr: none), errno untouched by the look-up.
template <typename Fn>
Fn real_of(CudartFn& fn) {
    void* p = fn.ptr.load(std::memory_order_acquire);
    if (__builtin_expect(p != nullptr, 1)) return reinterpret_cast<Fn>(p);
    ErrnoKeeper keep;
    return reinterpret_cast<Fn>(resolve_cudart(fn));
}

}  // namespace ncw

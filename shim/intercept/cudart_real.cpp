// The real CUDA runtime functions (see cudart_real.h).
#include "shim/intercept/cudart_real.h"

#include <dlfcn.h>

#include "shim/base/log.h"

namespace ncw {

namespace real_cudart {
#define NCW_REAL_CUDART(name, params, args) CudartFn name{#name};
NCW_CUDART_HOOKED(NCW_REAL_CUDART)
#undef NCW_REAL_CUDART
}  // namespace real_cudart

void* resolve_cudart(CudartFn& fn) {
    void* p = fn.ptr.load(std::memory_order_acquire);
    if (p) return p;
    p = dlsym(RTLD_NEXT, fn.name);
    for (const char* soname : {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}) {
        if (p) break;
        if (void* lib = dlopen(soname, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)) p = dlsym(lib, fn.name);
    }
    if (p)
        fn.ptr.store(p, std::memory_order_release);
    else
        NCW_LOG_ONCE(error, "{} was called but no CUDA runtime in the process has it: answered cudaErrorUnknown",
                     fn.name);
    return p;
}

}  // namespace ncw

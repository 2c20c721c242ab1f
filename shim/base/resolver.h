// Finding the real NCCL functions. torch loads libnccl.so.2 with RTLD_LOCAL, so dlsym(RTLD_NEXT) finds nothing
// there; we fall back to the already loaded libnccl.so.2 (RTLD_NOLOAD, so a second NCCL is never pulled in) and its
// exported pncclX aliases, then to NCCLWATCH_NCCL_LIBRARY. Results are cached; a miss is retried on the next call
// (libnccl may not be loaded yet) and logged once.
#pragma once

#include <nccl.h>

#include <atomic>
#include <string>
#include <type_traits>
#include <utility>

#include "ncclwatch/api_table.h"
#include "ncclwatch/nccl_newer_api.h"

namespace ncw {

struct RealFn {
    const char* name;
    std::atomic<void*> ptr{nullptr};
    std::atomic<bool> miss_logged{false};
    std::atomic<bool> absent{
        false};  // the loaded libnccl.so.2 has no such function (an older NCCL): never looked up again
};

void* resolve_slow(RealFn& fn, bool quiet = false);

// Whether the running NCCL has this function (no message when it has not). Once the loaded NCCL is known to lack it,
// a load.
inline bool real_available(RealFn& fn) {
    if (fn.ptr.load(std::memory_order_acquire) != nullptr) return true;
    return !fn.absent.load(std::memory_order_relaxed) && resolve_slow(fn, true) != nullptr;
}

template <typename Fn>
inline Fn real_fn(RealFn& fn) {
    void* p = fn.ptr.load(std::memory_order_acquire);
    if (__builtin_expect(p == nullptr, 0)) p = resolve_slow(fn);
    return reinterpret_cast<Fn>(p);
}

// A config form of a collective (ncclAllReduceConfig, NCCL 2.31) called where the loaded NCCL lacks it: said once,
// and the call goes to its plain form.
void config_form_missing(const char* name, const char* plain);

// Path of the library that real NCCL functions came from ("" until one resolved).
std::string real_nccl_path();

namespace real {
#define NCW_REAL_OP(name, since, params, args, desc) inline RealFn name{#name};
#define NCW_REAL_CONFIG_OP(name, since, plain, params, args, plain_args, desc) inline RealFn name{#name};
#define NCW_REAL_HOOKED(name, since, params, args) inline RealFn name{#name};
#define NCW_REAL_INTERNAL(name) inline RealFn name{#name};
NCW_NCCL_OPS(NCW_REAL_OP)
NCW_NCCL_CONFIG_OPS(NCW_REAL_CONFIG_OP)
NCW_NCCL_HOOKED(NCW_REAL_HOOKED)
NCW_NCCL_INTERNAL(NCW_REAL_INTERNAL)
#undef NCW_REAL_OP
#undef NCW_REAL_CONFIG_OP
#undef NCW_REAL_HOOKED
#undef NCW_REAL_INTERNAL
}  // namespace real

// Calls a real NCCL function exactly once. A missing function makes the call return ncclSystemError (a string for
// ncclGetErrorString) instead of crashing.
template <typename Fn, typename... Args>
inline auto call_real(RealFn& fn, Args... args) -> decltype(std::declval<Fn>()(args...)) {
    using R = decltype(std::declval<Fn>()(args...));
    Fn f = real_fn<Fn>(fn);
    if (__builtin_expect(f == nullptr, 0)) {
        if constexpr (std::is_same_v<R, ncclResult_t>)
            return ncclSystemError;
        else
            return "unknown (ncclwatch: real ncclGetErrorString not found)";
    }
    return f(args...);
}

// NCW_CALL_REAL(ncclCommCount, comm, &n)
#define NCW_CALL_REAL(name, ...) ::ncw::call_real<decltype(&::name)>(::ncw::real::name __VA_OPT__(, ) __VA_ARGS__)

}  // namespace ncw

// The exported NCCL entry points, generated from the API table. Each forwards to the real function exactly once,
// with the same arguments, and returns its result. Nothing on the op path allocates or throws; the init hooks
// catch what their bookkeeping may throw (run_init in hooks.cpp), so no exception crosses the C ABI.
#include <nccl.h>

#include "ncclwatch/api_table.h"
#include "shim/base/resolver.h"
#include "shim/intercept/hooks.h"
#include "shim/intercept/op_hook.h"
#include "shim/record/call_scope.h"

#define NCW_EXPORT extern "C" __attribute__((visibility("default")))
#define NCW_UNPACK(...) __VA_ARGS__
#define NCW_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__
#define NCW_DESC(type, ...) \
    ::ncw::OpDesc { ::ncw::disk::OpType::type, __VA_ARGS__ }

#define NCW_OP_WRAPPER(name, since, params, args, desc)                                     \
    NCW_EXPORT ncclResult_t name params {                                                   \
        ::ncw::CallScope scope;                                                             \
        auto call = [&]() -> ncclResult_t { return NCW_CALL_REAL(name, NCW_UNPACK args); }; \
        if (scope.nested()) return call();                                                  \
        return ::ncw::run_op(scope, NCW_DESC desc, call);                                   \
    }

// A loaded NCCL older than the config form (a program that found our export of it) gets the plain call.
#define NCW_CONFIG_OP_WRAPPER(name, since, plain, params, args, plain_args, desc) \
    NCW_EXPORT ncclResult_t name params {                                         \
        ::ncw::CallScope scope;                                                   \
        auto call = [&]() -> ncclResult_t {                                       \
            if (__builtin_expect(!::ncw::real_available(::ncw::real::name), 0)) { \
                ::ncw::config_form_missing(#name, #plain);                        \
                return NCW_CALL_REAL(plain, NCW_UNPACK plain_args);               \
            }                                                                     \
            return NCW_CALL_REAL(name, NCW_UNPACK args);                          \
        };                                                                        \
        if (scope.nested()) return call();                                        \
        return ::ncw::run_op(scope, NCW_DESC desc, call);                         \
    }

#define NCW_HOOKED_WRAPPER(name, since, params, args)                                                          \
    NCW_EXPORT ncclResult_t name params {                                                                      \
        ::ncw::CallScope scope;                                                                                \
        if (scope.nested()) return ::ncw::call_real<decltype(&::name)>(::ncw::real::name NCW_COMMA_ARGS args); \
        return ::ncw::hook::name(scope NCW_COMMA_ARGS args);                                                   \
    }

NCW_NCCL_OPS(NCW_OP_WRAPPER)
NCW_NCCL_CONFIG_OPS(NCW_CONFIG_OP_WRAPPER)
NCW_NCCL_HOOKED(NCW_HOOKED_WRAPPER)

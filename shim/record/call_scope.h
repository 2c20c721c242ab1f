// Per-thread bookkeeping around every wrapped call: the recursion guard (ncclBcast calls ncclBroadcast inside NCCL;
// only the outermost call is recorded), errno preservation, and the ops of an open ncclGroupStart/End.
#pragma once

#include <nccl.h>

#include <cerrno>
#include <cstdint>

#include "shim/record/comm_registry.h"
#include "shim/record/ring_publish.h"

namespace ncw {

struct ProfExpect;

struct GroupOp {
    OpRef ref;
    cudaStream_t stream;
    DevicePool* pool;               // nullptr: completes on return
    ProfExpect* offered = nullptr;  // offered to NCCL's profiler (profiler_link.h): who completes it is decided at
                                    // the outermost ncclGroupEnd
};

struct ThreadState {
    int call_depth = 0;   // our wrappers on the stack of this thread
    int group_depth = 0;  // open ncclGroupStart levels (the application's, not NCCL's internal ones)
    uint32_t group_id = 0;
    int group_n = 0;
    uint32_t tid = 0;  // gettid(), cached: it is a syscall
    static constexpr int kMaxGroupOps = 256;
    GroupOp* group_ops = nullptr;         // allocated at this thread's first group; never freed (a few KiB per thread)
    CommRuntime* current_op = nullptr;    // the communicator of the op whose real call runs now
    ProfExpect* api_expect = nullptr;     // that op's expectation for NCCL's profiler (profiler_link.h), if any
    CommRuntime* initializing = nullptr;  // the communicator whose blocking init runs on this thread (its profiler
                                          // init then comes on this thread too: profiler_plugin.cpp)
    CommRuntime* settling = nullptr;      // the communicator whose ncclCommFinalize / ncclCommDestroy runs on this
                                          // thread: NCCL's profiler finalize inside it finds its work complete
    RingCursor ring;                      // this thread's chunk of the ring (ring_publish.h)
};

// Small and initial-exec: one TLS access per call without __tls_get_addr, and small enough for the static TLS
// surplus should the library ever be dlopened rather than preloaded.
extern thread_local ThreadState tl_state __attribute__((tls_model("initial-exec")));
inline ThreadState& thread_state() { return tl_state; }

// Entered by every wrapper. nested() is true when another wrapper of ours is already on this thread's stack.
class CallScope {
public:
    CallScope() : ts_(thread_state()), errno_at_(&errno), saved_errno_(*errno_at_) { nested_ = ts_.call_depth++ > 0; }
    ~CallScope() { --ts_.call_depth; }
    bool nested() const { return nested_; }
    ThreadState& ts() { return ts_; }
    uint32_t tid() { return __builtin_expect(ts_.tid != 0, 1) ? ts_.tid : first_tid(); }
    // Our bookkeeping must not change what the host program sees in errno after the real call.
    int saved_errno() const { return saved_errno_; }
    void restore_errno() const { *errno_at_ = saved_errno_; }
    int* errno_location() const { return errno_at_; }  // errno is a call into the C library each time it is named

private:
    uint32_t first_tid();
    ThreadState& ts_;
    int* errno_at_;
    int saved_errno_;
    bool nested_;
};

// Keeps errno as the real call left it while our post-processing runs.
class ErrnoKeeper {
public:
    ErrnoKeeper() : at_(&errno), e_(*at_) {}
    explicit ErrnoKeeper(int* at) : at_(at), e_(*at) {}
    ~ErrnoKeeper() { *at_ = e_; }

private:
    int* at_;
    int e_;
};

}  // namespace ncw

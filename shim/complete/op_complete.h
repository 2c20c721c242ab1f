// What follows an op's call (shim/intercept/op_hook.h, the wrappers' hot path): its completion event, a follower
// entry, or completion on return; a nonblocking op's deferred event; a group's ops kept until its launch.
#pragma once

#include <nccl.h>

#include "shim/complete/completion_tracker.h"
#include "shim/record/call_scope.h"
#include "shim/record/profiler_link.h"
#include "shim/record/recorder.h"
#include "shim/record/runtime.h"

namespace ncw {

// How an op's completion is learnt once its call returned successfully (a failed call enqueued nothing: it is
// completed on return whatever this says). An op NCCL's profiler took completes through its events (profiler_link.h)
// and never gets here.
enum class After : uint8_t {
    Return,     // no GPU tracking for it (no pool, graph capture): completed on return
    Event,      // its events, or its claim's (pool != nullptr); the completed event lands right after its call
    EventLate,  // as Event, but a completed event lands later than right after it (a group's ops sharing a stream)
};

void group_add(Runtime& rt, ThreadState& ts, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
               ProfExpect* offered);
// After the call returned: the op's completion event (sampled op: `gen` != 0, owning `claim`), a follower entry, or
// completion on return. `now`: the time its return is stamped with, which dates a completion on return (so the
// caller times the return where the op is done on it); the fallbacks that complete it untracked read the clock.
void complete_after_return(Runtime& rt, CommRuntime& cr, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
                           StreamClaim* claim, uint64_t gen, ncclResult_t r, uint64_t now, After after);
// After the call of an op offered to NCCL's profiler (profiler_link.h): true when NCCL has it (the profiler then
// proves its GPU start and end; its stream's claim notes it, so that the tracker's catch-up event proves it complete
// once the stream is quiet: the last op before a pause, whose algorithm's stops prove nothing); false when it is ours
// again (never seen by NCCL's profiler, or failed). `now`: the time its return is stamped with.
bool complete_offered(Runtime& rt, CommRuntime& cr, ProfilerLink& pl, ProfExpect& e, const OpRef& ref,
                      cudaStream_t stream, DevicePool* pool, ncclResult_t r, uint64_t now);
// A nonblocking op whose call said "in progress", now enqueued (ncclCommGetAsyncError said success).
void complete_deferred(Runtime& rt, CommRuntime& cr, const DeferredOp& op, uint64_t now);

}  // namespace ncw

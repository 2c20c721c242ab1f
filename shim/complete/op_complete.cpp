#include "shim/complete/op_complete.h"

#include <new>

#include "shim/base/clock.h"

namespace ncw {

void complete_after_return(Runtime& rt, CommRuntime& cr, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
                           StreamClaim* claim, uint64_t gen, ncclResult_t r, uint64_t now, After after) {
    using Kind = CompletionTracker::EventKind;
    if (r == ncclInProgress && pool) {
        // A nonblocking communicator (by config, inherited from a split parent, or NCCL_COMM_BLOCKING=0): nothing
        // may be on the stream yet, so the event waits until ncclCommGetAsyncError reports success (and carries no
        // claim: the stream's next op may be sampled meanwhile).
        CompletionTracker::release(claim, gen);
        if (cr.deferred.try_push(DeferredOp{ref, stream})) {
            record_add_flags(rt.file, ref, disk::kFlagDeferred);
            return;
        }
        record_add_flags(rt.file, ref, disk::kFlagUntracked);
        record_done(rt.file, ref, now_mono_ns(), false);
        return;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        CompletionTracker::release(claim, gen);
        cr.failed_ops.fetch_add(1, std::memory_order_relaxed);
        record_failed(rt.file, ref, int32_t(r), now);  // failed, never completed: it stays outstanding, with its error
        return;
    }
    if (pool) {
        if (!gen && claim) {
            CompletionTracker::follow(claim, &ref, 1);
            return;
        }
        if (rt.tracker->record(pool, stream, &ref, 1, after == After::Event ? Kind::Done : Kind::DoneLate, claim, gen))
            return;
        CompletionTracker::release(claim, gen);
        if (claim) {
            // No event or queue slot to be had: it follows, so that a later event on its stream proves it complete
            // (counting it complete now would claim what the GPU has not shown).
            record_add_flags(rt.file, ref, disk::kFlagSampledOut);
            CompletionTracker::follow(claim, &ref, 1);
            return;
        }
        // Nothing later would cover it: counted, but it proves no GPU progress.
        record_add_flags(rt.file, ref, disk::kFlagUntracked);
        record_done(rt.file, ref, now_mono_ns(), false);
        return;
    }
    if (rt.completes_on_return)
        record_done_on_return(rt.file, ref, now);
    else
        record_done(rt.file, ref, now);
}

// A nonblocking op whose call said "in progress", now enqueued (ncclCommGetAsyncError said success): its completed
// event, recorded late (other work may have come after it on the stream since).
bool complete_offered(Runtime& rt, CommRuntime& cr, ProfilerLink& pl, ProfExpect& e, const OpRef& ref,
                      cudaStream_t stream, DevicePool* pool, ncclResult_t r, uint64_t now) {
    if (r == ncclInProgress && pl.by_identity() && e.api.load(std::memory_order_acquire)) {
        // Nonblocking after all (a split of a nonblocking parent, or NCCL_COMM_BLOCKING=0): NCCL launches it from its
        // own thread and its Coll names it when it does. No catch-up: nothing may be on the stream yet. Later ops
        // of this communicator take the deferred-event path.
        cr.nonblocking = true;
        return true;
    }
    if (r != ncclSuccess) {
        profiler_disown(e);  // failed: nothing was launched, whatever NCCL's events said
        return false;
    }
    if (profiler_withdraw(pl, e)) return false;
    if (pl.by_identity() && e.captured) {
        // Issued into a graph capture (its P2pApi or CollApi said so): nothing ran, and its Colls or P2ps are the
        // graph's replays, observed only. Done once captured, as every captured op.
        record_add_flags(rt.file, ref, disk::kFlagCaptured);
        record_done(rt.file, ref, now, false);
        return true;
    }
    // The stream's catch-up event, once it is quiet, proves it done (a claim table that is full leaves it to the
    // profiler's own rules: a later kernel, or a ring's last stop). Sends and receives: their own channels' stops or a
    // later kernel (the catch-up of one stream proves nothing of another's p2p).
    if (pool && rt.tracker && ref.coll_seq)
        if (StreamClaim* claim = cr.claim_for(stream)) CompletionTracker::follow_profiled(claim, ref.coll_seq, now);
    return true;
}

void complete_deferred(Runtime& rt, CommRuntime& cr, const DeferredOp& op, uint64_t now) {
    DevicePool* pool = cr.pool.load(std::memory_order_relaxed);
    if (pool && rt.tracker->record(pool, op.stream, &op.ref, 1, CompletionTracker::EventKind::DoneLate)) return;
    if (pool) record_add_flags(rt.file, op.ref, disk::kFlagUntracked);
    record_done(rt.file, op.ref, now, !pool);
}

void group_add(Runtime& rt, ThreadState& ts, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
               ProfExpect* offered) {
    if (!ts.group_ops) ts.group_ops = new (std::nothrow) GroupOp[ThreadState::kMaxGroupOps];
    if (ts.group_ops && ts.group_n < ThreadState::kMaxGroupOps) {
        ts.group_ops[ts.group_n++] = GroupOp{ref, stream, pool, offered};
        return;
    }
    // No room to decide later: the op is not left to the profiler.
    if (offered) profiler_disown(*offered);
    // A very large group (an all-to-all over many peers): keep the latest op per communicator and stream, which is
    // what progress needs; earlier records of that pair then miss their GPU timestamps.
    for (int i = ts.group_n - 1; ts.group_ops && i >= 0; --i) {
        GroupOp& g = ts.group_ops[i];
        if (g.ref.cr == ref.cr && g.stream == stream) {
            if (g.offered) profiler_disown(*g.offered);
            record_add_flags(rt.file, g.ref, disk::kFlagUntracked);
            record_done(rt.file, g.ref, now_mono_ns(), false);
            g = GroupOp{ref, stream, pool, offered};
            return;
        }
    }
    record_add_flags(rt.file, ref, disk::kFlagUntracked);
    record_done(rt.file, ref, now_mono_ns(), false);
}

}  // namespace ncw

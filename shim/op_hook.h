// The hot path of every collective and p2p wrapper: record, forward exactly once, arrange completion tracking.
#pragma once

#include "call_scope.h"
#include "clock.h"
#include "profiler_link.h"
#include "recorder.h"
#include "runtime.h"

namespace ncw {

void group_add(Runtime& rt, ThreadState& ts, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
               ProfExpect* offered);
// After the call returned: the op's completion event (sampled op: `gen` != 0, owning `claim`), a follower entry, or
// completion on return.
void complete_after_return(Runtime& rt, CommRuntime& cr, const OpRef& ref, cudaStream_t stream, DevicePool* pool,
                           StreamClaim* claim, uint64_t gen, ncclResult_t r, uint64_t now);

template <typename Call>
inline ncclResult_t run_op(CallScope& scope, const OpDesc& d, Call&& call) {
    Runtime* rt = runtime();
    if (!rt) return call();
    CommRuntime* cr = rt->comms.find(d.comm);
    if (__builtin_expect(!cr, 0)) cr = d.comm ? adopt_unknown_comm(*rt, d.comm) : nullptr;
    if (!cr) return call();
    ThreadState& ts = scope.ts();
    IssueOptions opt;
    opt.tid = scope.tid();
    opt.backtrace = rt->backtrace;
    bool in_group = ts.group_depth > 0;
    if (in_group) {
        opt.group_id = ts.group_id;
        opt.flags |= disk::kFlagInGroup;
    }
    DevicePool* pool = rt->tracker ? cr->pool.load(std::memory_order_relaxed) : nullptr;
    if (pool && !in_group && rt->tracker->capturing(d.stream)) {
        // Under graph capture nothing runs now; the op is marked and counts as done once captured. (A group's ops
        // are looked at per stream at ncclGroupEnd, and only where they would carry events: see hooks.cpp.)
        pool = nullptr;
        opt.flags |= disk::kFlagCaptured;
    }
    const uint64_t t_issue = now_mono_ns();
    // NCCL's profiler events (profiler_link.h): once they are known to flow for this communicator, a collective is
    // offered to them and carries no CUDA events.
    ProfilerLink* pl = nullptr;
    uint64_t nccl_seq = 0;
    bool offer = false;
    if (profiler_covers(d.op)) {
        std::atomic<uint64_t>& counter = cr->nccl_seq[uint8_t(d.op) & 15];
        nccl_seq = counter.load(std::memory_order_relaxed);  // one thread per communicator at a time, as in NCCL
        counter.store(nccl_seq + 1, std::memory_order_relaxed);
        pl = cr->prof.load(std::memory_order_acquire);
        offer = pl && pl->kernel_events.load(std::memory_order_relaxed) && !cr->nonblocking &&
                !(opt.flags & disk::kFlagCaptured);
    }
    // Outside a group the op is sampled (or not) now; a group's ops are sampled per stream at ncclGroupEnd.
    StreamClaim* claim = nullptr;
    uint64_t gen = 0;
    if (pool && !in_group && !offer) {
        claim = cr->claim_for(d.stream);
        gen = CompletionTracker::sample(claim, t_issue, rt->cfg.gpu_sample == GpuSample::All);
        if (!gen) opt.flags |= disk::kFlagSampledOut;
    }
    OpRef ref = record_issue(rt->file, *cr, d, opt, t_issue);
    ProfExpect* offered = pl ? profiler_expect(*pl, ref, d, nccl_seq, t_issue, offer) : nullptr;
    if (in_group) {
        group_add(*rt, ts, ref, d.stream, pool, offered);
    } else if (gen && rt->cfg.gpu_reached) {
        rt->tracker->record(pool, d.stream, &ref, 1, false, claim);
    }
    errno = scope.saved_errno();
    ts.current_op = cr;
    ncclResult_t r = call();
    ts.current_op = nullptr;
    ErrnoKeeper keep;
    uint64_t now = now_mono_ns();
    record_return(rt->file, ref, r, now);
    if (in_group) return r;
    // Taken by NCCL's Coll start inside the call: the profiler completes it. Otherwise it is ours again.
    if (offered && !profiler_withdraw(*pl, *offered) && r == ncclSuccess) return r;
    complete_after_return(*rt, *cr, ref, d.stream, pool, claim, gen, r, now);
    return r;
}

}  // namespace ncw

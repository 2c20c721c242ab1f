// The hot path of every collective and p2p wrapper: record, forward exactly once, arrange completion tracking.
#pragma once

#include "shim/base/clock.h"
#include "shim/complete/completion_tracker.h"
#include "shim/complete/op_complete.h"
#include "shim/intercept/comm_lifecycle.h"
#include "shim/record/call_scope.h"
#include "shim/record/graph_registry.h"
#include "shim/record/profiler_link.h"
#include "shim/record/recorder.h"
#include "shim/record/runtime.h"

namespace ncw {

// Whether every op of the communicator carries its own events: NCCLWATCH_GPU_SAMPLE=all, or NCCL's kernel events
// are out of step there (profiler_plugin.cpp: `desynced`; an all-to-all's local copies do that), so that its counts,
// from CUDA events from then on, stay exact where the pending events close them (a followed op proves nothing).
inline bool every_op_sampled(const Runtime& rt, const CommRuntime& cr) {
    if (rt.cfg.gpu_sample == GpuSample::All) return true;
    const ProfilerLink* pl = cr.prof.load(std::memory_order_relaxed);
    return pl && pl->desynced.load(std::memory_order_relaxed);
}

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
        // are looked at per stream at ncclGroupEnd, and only where they would carry events: see group_hooks.cpp.)
        pool = nullptr;
        opt.flags |= disk::kFlagCaptured;
    }
    const uint64_t t_issue = now_mono_ns();
    // NCCL's profiler events (profiler_link.h): once they are known to flow for this communicator, a collective is
    // offered to them and carries no CUDA events.
    ProfilerLink* pl = nullptr;
    uint64_t nccl_seq = 0;
    bool offer = false;
    if (rt->completes_on_return) {
        // No GPU tracking: NCCL's profiler events are not ours, nothing to offer or count for them.
    } else if (profiler_covers(d.op)) {
        std::atomic<uint64_t>& counter = cr->nccl_seq[uint8_t(d.op) & 15];
        nccl_seq = counter.load(std::memory_order_relaxed);  // one thread per communicator at a time, as in NCCL
        counter.store(nccl_seq + 1, std::memory_order_relaxed);
        // Not on a communicator of one rank: NCCL runs its collectives as a local copy and calls no profiler hook for
        // them (ncclLaunchOneRank), so an expectation would never be met.
        if (cr->nranks != 1) pl = cr->prof.load(std::memory_order_acquire);
        // Not once its kernel events are out of step (a CUDA graph replayed here: graph_hooks.cpp).
        offer = pl && pl->kernel_events.load(std::memory_order_relaxed) && !cr->nonblocking &&
                !(opt.flags & disk::kFlagCaptured) && !pl->desynced.load(std::memory_order_relaxed);
    } else if (disk::is_p2p(d.op)) {
        // By identity only (v5+): NCCL's P2pApi names it inside the call. Observed until a send's or receive's
        // kernel events are known to flow here (a transport may give them none), offered after. An empty or self
        // transfer may never reach the GPU: it keeps its own way. Whatever takes CUDA events (pool) is a lower bound
        // to its communicator's exactness (profiler_link.h).
        pl = cr->prof.load(std::memory_order_acquire);
        if (pl) {
            const bool followable = d.count > 0 && d.root_or_peer != cr->rank;
            if (!pl->by_identity() || !followable) {
                if (pool && followable && pl->kernel_events.load(std::memory_order_relaxed))
                    profiler_p2p_unfollowed(*pl);
                pl = nullptr;
            } else {
                offer = pl->p2p_kernel_events.load(std::memory_order_relaxed) && !cr->nonblocking &&
                        !(opt.flags & disk::kFlagCaptured) && !pl->desynced.load(std::memory_order_relaxed);
                // A communicator whose kernel events went out of step is off NCCL's events altogether (its own
                // message says so): nothing more to flag.
                if (!offer && pool && !pl->desynced.load(std::memory_order_relaxed)) {
                    if (pl->p2p_offered.load(std::memory_order_relaxed))
                        profiler_p2p_unfollowed(*pl);
                    else
                        profiler_p2p_early(*pl);
                }
            }
        }
    }
    // Outside a group the op is sampled (or not, with a mark or not) now; a group's ops are sampled per stream at
    // ncclGroupEnd.
    StreamClaim* claim = nullptr;
    CompletionTracker::Sampling smp;
    if (pool && !in_group && !offer) {
        claim = cr->claim_for(d.stream);
        smp = CompletionTracker::sample(claim, t_issue, every_op_sampled(*rt, *cr), d.count);
        if (!smp.gen) opt.flags |= disk::kFlagSampledOut;
    }
    OpRef ref = record_issue(rt->file, *cr, d, opt, t_issue);
    // Captured: it runs at each launch of its graph, recorded then (graph_hooks.cpp).
    if (__builtin_expect(opt.flags & disk::kFlagCaptured, 0)) graph_registry().captured(*cr, d, d.stream);
    ProfExpect* expect = pl ? profiler_expect(*pl, ref, d, nccl_seq, t_issue, offer) : nullptr;
    ProfExpect* offered = offer ? expect : nullptr;
    using Kind = CompletionTracker::EventKind;
    if (in_group) {
        group_add(*rt, ts, ref, d.stream, pool, offered);
    } else if (smp.gen && rt->cfg.gpu_reached) {
        rt->tracker->record(pool, d.stream, &ref, 1, Kind::Reached, claim);
    } else if (__builtin_expect(smp.mark, 0)) {
        rt->tracker->record(pool, d.stream, &ref, 1, Kind::Mark, claim);
    }
    scope.restore_errno();
    ts.current_op = cr;
    ts.api_expect = expect;  // NCCL's CollApi event, inside the call, names it (profiler_plugin.cpp)
    ncclResult_t r = call();
    ts.current_op = nullptr;
    ts.api_expect = nullptr;
    ErrnoKeeper keep(scope.errno_location());
    // The return is timed where it dates something: a completion on return (the call may take seconds: a first
    // send connects its peer inside it, and a completion dated before that would pass a peer's older counts as
    // current), and a failure (the communicator's first failure is dated). Elsewhere the record's return carries its
    // issue time: a returned call is what counts there, its completion is dated by whoever proves it (a stream's
    // events tell its followers apart by op_index, not by time), and a clock read is about 20 ns on the GPU hosts.
    if (rt->completes_on_return && !in_group && r == ncclSuccess) {  // no GPU tracking: returned is done
        record_returned_done(rt->file, ref, now_mono_ns());
        return r;
    }
    bool timed = r != ncclSuccess || (!in_group && !pool && !offered);  // done on its return below, or failed
    uint64_t now = timed ? now_mono_ns() : t_issue;
    record_return(rt->file, ref, r, now);
    if (in_group) return r;
    if (claim && !smp.gen && r == ncclSuccess) {  // it follows its stream's sample: counted, an event later proves it
        CompletionTracker::follow(claim, &ref, 1);
        return r;
    }
    // Taken by NCCL (its CollApi, or its Coll start, came within the call): the profiler completes it, and the
    // stream's catch-up event once the stream is quiet. Otherwise it is ours again.
    if (offered && complete_offered(*rt, *cr, *pl, *offered, ref, d.stream, pool, r, now)) return r;
    if (!pool && !timed) {  // NCCL's profiler did not take it after all: done on its return, dated by it
        now = now_mono_ns();
        record_return(rt->file, ref, r, now);
    }
    complete_after_return(*rt, *cr, ref, d.stream, pool, claim, smp.gen, r, now, pool ? After::Event : After::Return);
    return r;
}

}  // namespace ncw

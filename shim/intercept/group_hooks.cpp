// The group hooks of the API table (hooks.h): ncclGroupStart, ncclGroupEnd and ncclGroupSimulateEnd. A group's ops
// were recorded at their calls (op_hook.h group_add); at the outermost end they are sampled per stream, get their
// events, and are completed or followed, as one launch.
#include <algorithm>

#include "shim/base/clock.h"
#include "shim/base/resolver.h"
#include "shim/intercept/hooks.h"
#include "shim/intercept/op_hook.h"
#include "shim/record/graph_registry.h"
#include "shim/record/profiler_link.h"
#include "shim/record/runtime.h"

namespace ncw {

namespace {

// One event per stream covers up to kMaxRefs ops of that stream; ops in a group are all launched together. The
// callback gets the chunk's number (0, 1, ...: the same order on every pass over one group) and whether the chunk is
// its stream's only op in the group (then an event right after the launch is right after that op).
template <typename F>
void for_each_stream_chunk(ThreadState& ts, F&& f) {
    // Only the group's own entries are cleared, and a stream with one op passes that op in place: this runs twice
    // per launch on the path that sets small-message latency (all_reduce_perf -g N: one op per stream).
    bool handled[ThreadState::kMaxGroupOps];
    std::fill_n(handled, ts.group_n, false);
    int chunk = 0;
    auto same = [](const GroupOp& a, const GroupOp& b) { return a.stream == b.stream && a.pool == b.pool; };
    for (int i = 0; i < ts.group_n; ++i) {
        if (handled[i]) continue;
        GroupOp& first = ts.group_ops[i];
        handled[i] = true;
        int second = -1;
        for (int j = i + 1; j < ts.group_n && second < 0; ++j)
            if (!handled[j] && same(ts.group_ops[j], first)) second = j;
        if (second < 0) {
            f(first, &first.ref, 1, chunk++, true);
            continue;
        }
        OpRef refs[CompletionTracker::kMaxRefs];
        int n = 0;
        refs[n++] = first.ref;
        for (int j = second; j < ts.group_n; ++j) {
            GroupOp& g = ts.group_ops[j];
            if (handled[j] || !same(g, first)) continue;
            handled[j] = true;
            refs[n++] = g.ref;
            if (n == CompletionTracker::kMaxRefs) {
                f(first, refs, n, chunk++, false);
                n = 0;
            }
        }
        if (n) f(first, refs, n, chunk++, false);
    }
}

// Closes one ncclGroupStart level; true when it was the outermost, the one that launches (or simulates) the group.
bool leave_group(ThreadState& ts) {
    bool outermost = ts.group_depth == 1;
    if (ts.group_depth > 0) --ts.group_depth;
    return outermost;
}

}  // namespace

// The ops this thread gathered (ts.group_ops, recorded at their calls), launched together: sampled per stream now
// (nothing is on any stream before the launch), launched by `launch`, then completed or followed.
ncclResult_t launch_gathered(CallScope& s, Runtime& rt, ThreadState& ts, ncclResult_t (*launch)(void*), void* arg) {
    // Ops offered to NCCL's profiler carry no events: they leave the stream chunks, and after the call each is
    // either taken (NCCL's Coll start came within the call) or ours again.
    GroupOp offered[ThreadState::kMaxGroupOps];
    int n_offered = 0;
    int kept = 0;
    for (int i = 0; i < ts.group_n; ++i) {
        if (ts.group_ops[i].offered)
            offered[n_offered++] = ts.group_ops[i];
        else
            ts.group_ops[kept++] = ts.group_ops[i];
    }
    ts.group_n = kept;
    // Nothing is on any stream until the outermost ncclGroupEnd launches the group: each stream's chunk is sampled
    // (or follows, with a mark or not) now, and a sampled chunk's "reached" event or a mark is recorded now.
    using Kind = CompletionTracker::EventKind;
    StreamClaim* claims[ThreadState::kMaxGroupOps];
    uint64_t gens[ThreadState::kMaxGroupOps];
    bool captured[ThreadState::kMaxGroupOps];
    const uint64_t t_sample = now_mono_ns();
    for_each_stream_chunk(ts, [&](GroupOp& g, OpRef* refs, int n, int k, bool) {
        claims[k] = nullptr;
        gens[k] = 0;
        captured[k] = false;
        if (!g.pool || !rt.tracker) return;
        claims[k] = refs[0].cr->claim_for(g.stream);
        const bool every_op = every_op_sampled(rt, *refs[0].cr);
        const CompletionTracker::Sampling smp = CompletionTracker::sample(claims[k], t_sample, every_op, 0);
        gens[k] = smp.gen;
        if (!gens[k]) {
            for (int i = 0; i < n; ++i) record_add_flags(rt.file, refs[i], disk::kFlagSampledOut);
            // A mark is an event too: never into a capture (the chunk then just follows).
            if (smp.mark && rt.tracker->capturing(g.stream))
                claims[k]->mark_dropped();
            else if (smp.mark)
                rt.tracker->record(g.pool, g.stream, refs, n, Kind::Mark, claims[k]);
        } else if (rt.tracker->capturing(g.stream)) {
            // Only a chunk that would carry events asks the driver (a group of ops on other devices' streams is the
            // latency-bound case, and a follower then costs no driver call); captured ops complete on return. A
            // capture starts after a pause on its stream, so its first chunk is a sampled one and gets marked.
            CompletionTracker::release(claims[k], gens[k]);
            claims[k] = nullptr;
            gens[k] = 0;
            for (int i = 0; i < n; ++i) {
                record_add_flags(rt.file, refs[i], disk::kFlagCaptured);
                graph_registry().captured(rt.file, refs[i], g.stream);
            }
            captured[k] = true;
        } else if (rt.cfg.gpu_reached) {
            rt.tracker->record(g.pool, g.stream, refs, n, Kind::Reached, claims[k]);
        }
    });
    errno = s.saved_errno();
    ncclResult_t r = launch(arg);
    ErrnoKeeper keep;
    uint64_t now = now_mono_ns();
    for (int i = 0; i < ts.group_n; ++i) record_return(rt.file, ts.group_ops[i].ref, r, now);
    for (int i = 0; i < n_offered; ++i) {
        GroupOp& g = offered[i];
        record_return(rt.file, g.ref, r, now);
        ProfilerLink* pl = g.ref.cr->prof.load(std::memory_order_relaxed);
        if (pl && complete_offered(rt, *g.ref.cr, *pl, *g.offered, g.ref, g.stream, g.pool, r, now)) continue;
        // Ours again (rare: NCCL never saw it through its profiler, or it failed): its own events, unless its stream
        // is being captured.
        DevicePool* pool = g.pool;
        if (pool && rt.tracker && rt.tracker->capturing(g.stream)) {
            record_add_flags(rt.file, g.ref, disk::kFlagCaptured);
            graph_registry().captured(rt.file, g.ref, g.stream);
            pool = nullptr;
        }
        complete_after_return(rt, *g.ref.cr, g.ref, g.stream, pool, nullptr, 0, r, now, After::EventLate);
    }
    for_each_stream_chunk(ts, [&](GroupOp& g, OpRef* refs, int n, int k, bool alone) {
        DevicePool* pool = captured[k] ? nullptr : g.pool;
        if (n == 1 || !pool || r != ncclSuccess) {
            // Alone on its stream, offered ops included (they are launched with it): only then is an event after
            // the launch right after this op.
            for (int i = 0; alone && i < n_offered; ++i) alone = offered[i].stream != g.stream;
            const After after = !pool ? After::Return : alone ? After::Event : After::EventLate;
            for (int i = 0; i < n; ++i)
                complete_after_return(rt, *refs[i].cr, refs[i], g.stream, pool, claims[k], gens[k], r, now, after);
            return;
        }
        if (!gens[k] && claims[k]) {
            CompletionTracker::follow(claims[k], refs, n);
            return;
        }
        // After several ops on one stream: NCCL may launch them in any order, so pending it proves none of them.
        if (rt.tracker->record(g.pool, g.stream, refs, n, Kind::DoneLate, claims[k], gens[k])) return;
        CompletionTracker::release(claims[k], gens[k]);
        if (claims[k]) {
            for (int i = 0; i < n; ++i) record_add_flags(rt.file, refs[i], disk::kFlagSampledOut);
            CompletionTracker::follow(claims[k], refs, n);  // a later event on the stream proves them (see above)
            return;
        }
        for (int i = 0; i < n; ++i) {
            record_add_flags(rt.file, refs[i], disk::kFlagUntracked);
            record_done(rt.file, refs[i], now, false);
        }
    });
    ts.group_n = 0;
    return r;
}

namespace hook {

ncclResult_t ncclGroupStart(CallScope& s) {
    ThreadState& ts = s.ts();
    if (ts.group_depth++ == 0) {
        Runtime* rt = runtime();
        ts.group_id = rt ? rt->group_counter.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
        ts.group_n = 0;
    }
    errno = s.saved_errno();
    return NCW_CALL_REAL(ncclGroupStart);
}

ncclResult_t ncclGroupEnd(CallScope& s) {
    ThreadState& ts = s.ts();
    bool outermost = leave_group(ts);
    Runtime* rt = runtime();
    if (!outermost || !rt || ts.group_n == 0) {
        errno = s.saved_errno();
        ncclResult_t r = NCW_CALL_REAL(ncclGroupEnd);
        if (outermost && rt && r == ncclSuccess) {
            ErrnoKeeper keep;
            refresh_pending_identities(*rt);  // inits inside the group are done now
        }
        return r;
    }
    return launch_gathered(
        s, *rt, ts,
        [](void*) {
            ncclResult_t r = NCW_CALL_REAL(ncclGroupEnd);
            ErrnoKeeper keep;
            // An init inside this group is done now too: its rank and device are known before its events are recorded.
            if (Runtime* rt = runtime(); rt && r == ncclSuccess) refresh_pending_identities(*rt);
            return r;
        },
        nullptr);
}

// Ends the group like ncclGroupEnd but launches nothing: the queued ops count as done (they will never run) and are
// marked untracked, so they neither stall nor prove progress.
ncclResult_t ncclGroupSimulateEnd(CallScope& s, ncclSimInfo_t* simInfo) {
    ThreadState& ts = s.ts();
    bool outermost = leave_group(ts);
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclGroupSimulateEnd, simInfo);
    Runtime* rt = runtime();
    if (outermost && rt) {
        ErrnoKeeper keep;
        uint64_t now = now_mono_ns();
        for (int i = 0; i < ts.group_n; ++i) {
            record_add_flags(rt->file, ts.group_ops[i].ref, disk::kFlagUntracked);
            record_return(rt->file, ts.group_ops[i].ref, r, now);
            record_done(rt->file, ts.group_ops[i].ref, now, false);
        }
        ts.group_n = 0;
    }
    return r;
}

}  // namespace hook
}  // namespace ncw

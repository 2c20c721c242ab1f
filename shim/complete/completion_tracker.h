// GPU completion without blocking anyone: the wrapper records a pooled CUDA event on the operation's stream (after
// the enqueue: "completed"; before it: "reached", meaning all earlier work on that stream is done) and hands it to a
// queue; a thread of ours polls the events and advances the progress block. Events come from a fixed pool per
// device; when the pool or the queue is exhausted the wrapper falls back to completion-on-return for that op.
//
// Sampling (NCCLWATCH_GPU_SAMPLE=auto): an event between two NCCL kernels costs the issuing thread and the GPU about
// half a microsecond, which shows in small-message latency. So at most one op per stream at a time carries events
// (the "sampled" op, see StreamClaim); an op issued while one is in flight "follows" it: it is only counted in its
// StreamClaim. Each event carries a snapshot of that count taken just before it was recorded, so when it completes,
// that many followers are complete (stream order). Every kMarkEveryOps followers, one gets a "mark": a single event
// just before it, so that a burst the CPU enqueued far ahead of the GPU has completion evidence all along it (see
// StreamClaim for why and what it costs). When a stream falls quiet with followers not yet covered, the poller
// records one catch-up event on it. An op after a pause of 1 ms or more is always sampled, so the op a hang starts
// on (usually the first after compute) has its own events. Followers' ring records get their completion time from
// the poller's scan of the ring (best effort: a record the ring overwrote first keeps none).
//
// What the counts prove (format 1.4; gpu_source = Events, progress_exact = 0): coll_reached and coll_completed are
// lower bounds (an event proved them). Pending events prove the other side, written by the poller once per pass:
// coll_unreached is the lowest seq whose "reached" event or mark (recorded before it) is still pending, and
// coll_uncompleted the lowest seq with such an event, or with a "completed" event recorded right after its call
// returned, still pending; 0 when nothing pending proves anything. A catch-up or deferred event proves nothing while
// pending (other work may sit between the op and it), nor does a "completed" event after several grouped ops on one
// stream (NCCL may order them as it likes).
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>

#include "shim/base/config.h"
#include "shim/base/cuda_driver.h"
#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"

namespace ncw {

class CompletionTracker {
public:
    static constexpr int kMaxRefs = 8;                     // ops covered by one event (a group launch is split)
    static constexpr uint64_t kCatchUpAfterNs = 10000000;  // a stream's uncovered followers this old get a catch-up

    // nullptr when GPU tracking is off or impossible (no libcuda in the process). `comms`: where the poller finds
    // the stream claims to catch up on.
    static CompletionTracker* create(const Config& cfg, const RankFileWriter* file, const CommRegistry* comms);

    // At communicator registration (not the hot path): the event pool of the communicator's device.
    DevicePool* pool_for_device(int dev);

    // What an event stands for (Pending's kind): which side of its op(s) it was recorded on, and what it proves.
    enum class EventKind : uint8_t {
        Reached,   // just before the op(s): done, they are reached; pending, proven not reached
        Mark,      // Reached, for an op that otherwise follows (no completed event of its own; see StreamClaim);
                   // done, it raises coll_reached to the followers before it only
        Done,      // right after the call of its one op returned: done, completed; pending, proven not completed
        DoneLate,  // after the op(s) but not right after one op's return: done, completed; pending, proves nothing
    };
    // What sample() decided for an op: its own events (gen != 0, owning the claim), or it follows, with a mark or not.
    struct Sampling {
        uint64_t gen = 0;
        bool mark = false;
    };

    // Hot path.
    bool capturing(cudaStream_t stream) const;
    // Whether an op of `count` elements issued at `now` on the stream of `claim` carries its own events, follows the
    // sample in flight, or follows with a mark. No claim entry: always sampled.
    static Sampling sample(StreamClaim* claim, uint64_t now, bool every_op, uint64_t count) {
        if (!claim) return {now | 1, false};
        const uint64_t last = claim->t_last_issue_ns.load(std::memory_order_relaxed);
        claim->t_last_issue_ns.store(now, std::memory_order_relaxed);
        if (!every_op && claim->owner.load(std::memory_order_relaxed) != 0 &&
            (now - last < StreamClaim::kPauseNs ||
             claim->samples.load(std::memory_order_relaxed) >= StreamClaim::kMaxSamples))
            return {0, claim->mark_due(count)};
        const uint64_t gen = now | 1;
        claim->samples.fetch_add(1, std::memory_order_relaxed);
        claim->owner.store(gen, std::memory_order_relaxed);
        claim->restart_marks(claim->followers.load(std::memory_order_relaxed));
        return {gen, false};
    }
    // The sampled op `gen` is resolved (its completed event done or failed, or it got none).
    static void release(StreamClaim* claim, uint64_t gen) {
        if (!claim || !gen) return;
        claim->samples.fetch_sub(1, std::memory_order_relaxed);
        claim->owner.compare_exchange_strong(gen, 0, std::memory_order_relaxed);
    }
    // An event of `kind` for refs[0..n) on the stream. With a claim, the event also covers the followers counted in it
    // so far, and a Done event of a sampled op releases the claim (generation `gen`) once it resolves. False when no
    // event or queue slot could be had (a Mark's claim then counts it dropped; the others are fallbacks).
    bool record(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, EventKind kind,
                StreamClaim* claim = nullptr, uint64_t gen = 0);
    // Ops without events of their own, enqueued on the claim's stream (their calls returned). A claim is its
    // communicator's, so these have one writer at a time (NCCL's rule): plain stores, the count last (release).
    static void follow(StreamClaim* claim, const OpRef* refs, int n) {
        uint64_t seq = 0, op = 0;
        for (int i = 0; i < n; ++i) {
            seq = refs[i].coll_seq > seq ? refs[i].coll_seq : seq;
            op = refs[i].op_index > op ? refs[i].op_index : op;
        }
        if (seq) raise_to(claim->follower_seq, seq);
        raise_to(claim->follower_op, op);
        bump(claim->followers, uint64_t(n));
    }

    // A collective NCCL's profiler completes, enqueued on the claim's stream (its call returned): the poller's catch-up
    // event after it, once the stream is quiet, proves it and the stream's earlier ones done (profiler_covered).
    static void follow_profiled(StreamClaim* claim, uint64_t coll_seq, uint64_t now) {
        if (claim->profiled_seq.load(std::memory_order_relaxed) < coll_seq)
            claim->profiled_seq.store(coll_seq, std::memory_order_release);  // one issuing thread per communicator
        claim->t_last_issue_ns.store(now, std::memory_order_relaxed);
    }

    // Teardown (ncclCommFinalize, ncclCommDestroy; not the hot path). Those calls return once NCCL has completed the
    // communicator's work, and a process often exits right after, before the poller's next pass would cover the last
    // followers (they would stay "issued, not completed" in the file for ever). So the calling thread records one
    // event on each stream with uncovered followers before the call (settle_begin) and, once it returned, credits
    // the followers of every such event already complete (settle_end); one not complete yet goes to the poller.
    // Neither ever waits.
    // An event recorded on a claim's stream after the followers counted so far (the poller's catch-up, a teardown's
    // settling event): once it completes, so have they.
    struct Cover {
        StreamClaim* claim;
        DevicePool* pool;
        void* ev;  // CUevent
        cudaStream_t stream;
        uint64_t followers, follower_seq, follower_op;
        uint64_t profiled_seq;  // the claim's profiled_seq just before the record
    };
    struct Settle {
        CommRuntime* cr = nullptr;
        int n = 0;
        Cover e[CommRuntime::kClaims];
    };
    Settle settle_begin(CommRuntime& cr);
    void settle_end(Settle& s);

    // At a clean exit (the runtime's atexit path; its thread is leaving anyway): the poller makes a few quick passes in
    // which a stream's uncovered followers get their catch-up event at once, so that the file left behind says what
    // completed. Waits for them at most `max_wait_ms` (a stuck GPU, or a poller stuck in the driver).
    void drain_at_exit(int max_wait_ms);

    uint64_t events_recorded() const { return recorded_.load(std::memory_order_relaxed); }
    uint64_t followers() const;  // summed over the claims (not the hot path)
    uint64_t catch_ups() const { return catch_ups_.load(std::memory_order_relaxed); }
    uint64_t marks() const { return marks_.load(std::memory_order_relaxed); }
    uint64_t fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }
    uint64_t last_poll_ns() const { return last_poll_ns_.load(std::memory_order_relaxed); }
    const PassCounter& pass_counter() const { return pass_; }

    void poll_forever();  // the tracker thread's body

private:
    CompletionTracker(const RankFileWriter* file, const CommRegistry* comms);
    void stamp_followers(const CommRuntime& cr, cudaStream_t stream, uint64_t follower_op, uint64_t n);
    struct Impl;
    Impl* impl_;
    const RankFileWriter* file_;
    const CommRegistry* comms_;
    CUresult (*is_capturing_)(CUstream, CUstreamCaptureStatus*);  // the driver's, looked up once (the hot path asks)
    std::atomic<uint64_t> recorded_{0};
    std::atomic<uint64_t> catch_ups_{0};
    std::atomic<uint64_t> marks_{0};
    std::atomic<uint64_t> fallbacks_{0};
    std::atomic<uint64_t> last_poll_ns_{0};
    std::atomic<uint64_t> passes_{0};  // the poller's passes so far
    PassCounter pass_;                 // odd while a pass may hold comm slot pointers (comm_slots.h)
    std::atomic<bool> drain_requested_{false};
};

}  // namespace ncw

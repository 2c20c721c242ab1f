// The completion tracker (see completion_tracker.h): what an event in flight is and the device pools; the events
// that cover a stream's followers; the record (hot path) and the poller; and a communicator's teardown, which
// settles its streams' last followers with covering events of its own.
#include "shim/complete/completion_tracker.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "shim/base/clock.h"
#include "shim/base/cuda_driver.h"
#include "shim/base/log.h"
#include "shim/base/mpmc_queue.h"
#include "shim/complete/profiler_plugin.h"
#include "shim/complete/progress_proofs.h"
#include "shim/complete/sync_apply.h"
#include "shim/record/recorder.h"

namespace ncw {

// One device's primary context and its free events.
struct DevicePool {
    int dev = -1;
    CUcontext ctx = nullptr;
    MpmcQueue<CUevent> free{kEventsPerDevice};
    static constexpr size_t kEventsPerDevice = 1024;
};

namespace completion {

struct Pending {
    CUevent ev = nullptr;
    DevicePool* pool = nullptr;
    cudaStream_t stream = nullptr;
    CommRuntime* cr = nullptr;     // the claim's communicator
    StreamClaim* claim = nullptr;  // whose followers this event covers (nullptr: none)
    uint64_t gen = 0;              // nonzero: a sampled op's completed event, which releases the claim
    uint64_t followers = 0;        // the claim's follower count and highest seq just before the record
    uint64_t follower_seq = 0;
    uint64_t follower_op = 0;
    uint64_t profiled_seq = 0;  // a cover event: the profiled collectives it proves done (StreamClaim::profiled_seq)
    // What it proves (CompletionTracker::EventKind). A catch-up event is a DoneLate with n == 0.
    CompletionTracker::EventKind kind = CompletionTracker::EventKind::DoneLate;
    int n = 0;
    OpRef refs[CompletionTracker::kMaxRefs];
    bool done() const {
        return kind == CompletionTracker::EventKind::Done || kind == CompletionTracker::EventKind::DoneLate;
    }
};

constexpr size_t kQueueCapacity = 8192;
constexpr int kMaxDevices = 64;

}  // namespace completion

struct CompletionTracker::Impl {
    MpmcQueue<completion::Pending> queue{completion::kQueueCapacity};
    std::mutex pools_mu;  // only pool creation, at communicator registration
    DevicePool* pools[completion::kMaxDevices] = {};
};

// ---- Events that cover a stream's followers (the poller's catch-up, a teardown's settle) ----

namespace completion {

// A stream whose capture status cannot be had counts as captured: nothing of ours may join a user's graph.
bool capturing_now(const CudaDriver& cu, cudaStream_t stream) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return cu.cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &st) != CUDA_SUCCESS ||
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

enum class CoverResult { Recorded, NotNow, Refused };

// One event on `stream` after the claim's followers counted so far (the caller has the pool's context current).
// NotNow: no free event, or the stream is being captured (an event recorded into a capture must never be queried);
// Refused: the stream takes no event from us.
CoverResult record_cover(const CudaDriver& cu, DevicePool* pool, StreamClaim& c, cudaStream_t stream,
                         CompletionTracker::Cover& out) {
    CUevent ev;
    if (!pool->free.try_pop(ev)) return CoverResult::NotNow;
    if (capturing_now(cu, stream)) {
        pool->free.try_push(ev);
        return CoverResult::NotNow;
    }
    out.claim = &c;
    out.pool = pool;
    out.ev = ev;
    out.stream = stream;
    out.followers = c.followers.load(std::memory_order_acquire);  // read before the record: all enqueued before it
    out.follower_seq = c.follower_seq.load(std::memory_order_relaxed);
    out.follower_op = c.follower_op.load(std::memory_order_relaxed);
    out.profiled_seq = c.profiled_seq.load(std::memory_order_acquire);
    if (cu.cuEventRecord(ev, reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
        pool->free.try_push(ev);
        return CoverResult::Refused;
    }
    // A capture that began between the check and the record may hold the record: never query that event (a later
    // record outside any capture re-arms it, so it can go back to the pool).
    if (capturing_now(cu, stream)) {
        pool->free.try_push(ev);
        return CoverResult::NotNow;
    }
    return CoverResult::Recorded;
}

// A cover event for the poller to query: a completion event of no op of its own.
Pending pending_for(const CompletionTracker::Cover& cv, CommRuntime* cr) {
    Pending p;
    p.ev = static_cast<CUevent>(cv.ev);
    p.pool = cv.pool;
    p.stream = cv.stream;
    p.cr = cr;
    p.claim = cv.claim;
    p.followers = cv.followers;
    p.follower_seq = cv.follower_seq;
    p.profiled_seq = cv.profiled_seq;
    p.follower_op = cv.follower_op;
    p.kind = CompletionTracker::EventKind::DoneLate;  // after followers, perhaps long after: proves nothing pending
    return p;
}

}  // namespace completion

using namespace completion;

// ---- Record and the poller ----

CompletionTracker::CompletionTracker(const RankFileWriter* file, const CommRegistry* comms)
    : impl_(new Impl), file_(file), comms_(comms), is_capturing_(cuda_driver().cuStreamIsCapturing) {}

CompletionTracker* CompletionTracker::create(const Config& cfg, const RankFileWriter* file, const CommRegistry* comms) {
    if (!cfg.gpu_events) return nullptr;
    if (!cuda_driver().ok) return nullptr;
    return new CompletionTracker(file, comms);  // never freed: its thread may outlive static destruction at exit
}

DevicePool* CompletionTracker::pool_for_device(int dev) {
    if (dev < 0 || dev >= kMaxDevices) return nullptr;
    std::lock_guard<std::mutex> lock(impl_->pools_mu);
    if (impl_->pools[dev]) return impl_->pools[dev];
    const CudaDriver& cu = cuda_driver();
    CUdevice d;
    CUcontext ctx = nullptr;
    if (cu.cuDeviceGet(&d, dev) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, d) != CUDA_SUCCESS) {
        NCW_LOG_ONCE(warn, "cannot retain the primary context of device {}: its completion is not tracked", dev);
        return nullptr;
    }
    auto* pool = new DevicePool;
    pool->dev = dev;
    pool->ctx = ctx;
    if (cu.cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return nullptr;
    size_t made = 0;
    for (; made < DevicePool::kEventsPerDevice; ++made) {
        CUevent ev;
        if (cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) break;
        pool->free.try_push(ev);
    }
    CUcontext popped;
    cu.cuCtxPopCurrent(&popped);
    if (made == 0) {
        NCW_LOG_ONCE(warn, "cannot create CUDA events on device {}: its completion is not tracked", dev);
        return nullptr;
    }
    impl_->pools[dev] = pool;
    return pool;
}

bool CompletionTracker::capturing(cudaStream_t stream) const {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (is_capturing_(reinterpret_cast<CUstream>(stream), &st) != CUDA_SUCCESS) return false;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool CompletionTracker::record(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, EventKind kind,
                               StreamClaim* claim, uint64_t gen) {
    if (!pool || n <= 0) return false;
    const bool mark = kind == EventKind::Mark;
    // A mark that gets no event only loses precision: it is no op's fallback.
    auto fail = [&] {
        if (mark)
            claim->mark_dropped();
        else
            fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    };
    Pending p;
    if (!pool->free.try_pop(p.ev)) return fail();
    if (claim) {
        // Read before the record: every follower counted by now was enqueued before the event.
        p.followers = claim->followers.load(std::memory_order_acquire);
        p.follower_seq = claim->follower_seq.load(std::memory_order_relaxed);
        p.follower_op = claim->follower_op.load(std::memory_order_relaxed);
    }
    if (cuda_driver().cuEventRecord(p.ev, reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
        pool->free.try_push(p.ev);
        return fail();
    }
    p.pool = pool;
    p.stream = stream;
    p.cr = refs[0].cr;
    p.claim = claim;
    p.gen = kind == EventKind::Done || kind == EventKind::DoneLate ? gen : 0;
    p.kind = kind;
    p.n = n < kMaxRefs ? n : kMaxRefs;
    for (int i = 0; i < p.n; ++i) p.refs[i] = refs[i];
    if (!impl_->queue.try_push(p)) {
        // The event is recorded but nobody will query it: give it back later is impossible without a queue slot,
        // so it is leaked (bounded by how often the queue is full, which a poller that keeps up never lets happen).
        return fail();
    }
    recorded_.fetch_add(1, std::memory_order_relaxed);
    if (mark) marks_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void CompletionTracker::drain_at_exit(int max_wait_ms) {
    // The pass under way may have begun before the request; the next records the catch-ups, the one after reads them.
    const uint64_t target = passes_.load(std::memory_order_acquire) + 3;
    drain_requested_.store(true, std::memory_order_release);
    for (int i = 0; i < max_wait_ms && passes_.load(std::memory_order_acquire) < target; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

uint64_t CompletionTracker::followers() const {
    uint64_t n = 0;
    comms_->for_each([&](const CommRuntime& cr) {
        for (const auto& c : cr.claims) n += c.followers.load(std::memory_order_relaxed);
    });
    return n;
}

void CompletionTracker::poll_forever() {
    const CudaDriver& cu = cuda_driver();
    // PyTorch captures CUDA graphs in global mode, in which a query from another thread would invalidate the
    // capture; a relaxed thread is allowed to query.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cu.cuThreadExchangeStreamCaptureMode(&mode);
    std::deque<Pending> pending;
    std::vector<std::pair<DevicePool*, cudaStream_t>> streams;
    std::vector<uint16_t> stream_of;  // per pending entry: its index in `streams`
    std::vector<uint8_t> state;       // per pending entry: 0 not known done, 1 complete, 2 failed
    CompletionBatch batch;
    ProgressProofs proofs;
    SyncApply sync_apply;
    CUcontext current = nullptr;
    auto use_ctx = [&](DevicePool* pool) {
        if (pool->ctx != current && cu.cuCtxSetCurrent(pool->ctx) == CUDA_SUCCESS) current = pool->ctx;
    };
    auto query = [&](Pending& p) {
        use_ctx(p.pool);
        return cu.cuEventQuery(p.ev);
    };
    // Followers covered by a completed event: counted complete in their communicator's progress block.
    auto credit = [&](CommRuntime& cr, StreamClaim& c, uint64_t followers, uint64_t seq, uint64_t op) {
        c.covered_op = std::max(c.covered_op, op);
        batch.followers_done(cr.slot, c.credit_upto(followers), seq);
    };
    // A pending event holds its communicators' runtimes (CommRuntime::holds) from the pass that takes it to the end
    // of the pass that resolves it, whose flush is its last write through them: a destroyed one is not reused for
    // a later communicator meanwhile (comm_pool.h). Its own and each ref's, the same on both sides.
    auto hold = [](const Pending& p) {
        if (p.cr) p.cr->holds.fetch_add(1);
        for (int k = 0; k < p.n; ++k)
            if (p.refs[k].cr) p.refs[k].cr->holds.fetch_add(1);
    };
    std::vector<CommRuntime*> resolved;  // the holds of the events resolved in this pass, let go at its end
    auto resolve = [&](const Pending& p) {
        if (p.cr) resolved.push_back(p.cr);
        for (int k = 0; k < p.n; ++k)
            if (p.refs[k].cr) resolved.push_back(p.refs[k].cr);
    };
    // One catch-up event after the claim's uncovered followers (see record_cover).
    auto catch_up = [&](CommRuntime& cr, StreamClaim& c, DevicePool* pool, cudaStream_t stream) {
        use_ctx(pool);
        Cover cv;
        const CoverResult r = record_cover(cu, pool, c, stream, cv);
        if (r == CoverResult::Recorded) {
            pending.push_back(pending_for(cv, &cr));
            hold(pending.back());
            catch_ups_.fetch_add(1, std::memory_order_relaxed);
        }
        return r;
    };
    // Followers' ring records, for their completion times: scanned from the ring as they appear.
    uint64_t ring_cursor = 0;
    uint64_t ring_head_prev = 0;
    std::vector<uint64_t> unstamped;  // tickets
    std::vector<CommRuntime*> by_slot(disk::kMaxComms, nullptr);
    std::vector<CommRuntime*> unslotted;  // communicators beyond the file's comm table, found by comm_id
    std::vector<std::pair<StreamClaim*, uint64_t>>
        claim_pending;  // claim, highest follower count a pending event covers

    for (;;) {
        pass_.enter();  // from here to the flush, slot pointers may be held (comm_slots.h)
        last_poll_ns_.store(now_mono_ns(), std::memory_order_relaxed);
        const bool draining = drain_requested_.load(std::memory_order_acquire);
        Pending p;
        while (impl_->queue.try_pop(p)) {
            hold(p);
            pending.push_back(p);
        }

        streams.clear();
        stream_of.assign(pending.size(), 0);
        for (size_t i = 0; i < pending.size(); ++i) {
            const std::pair<DevicePool*, cudaStream_t> key{pending[i].pool, pending[i].stream};
            size_t s = std::find(streams.begin(), streams.end(), key) - streams.begin();
            if (s == streams.size()) streams.push_back(key);
            stream_of[i] = uint16_t(s);
        }

        // Events on one stream complete in order: if a stream's newest event is done, so are all before it, and one
        // query serves them all. Otherwise walk that stream from its oldest until one is not done yet. This keeps our
        // driver calls (which share locks with the training thread's launches) to about one per stream.
        state.assign(pending.size(), 0);
        for (size_t s = 0; s < streams.size(); ++s) {
            size_t newest = SIZE_MAX;
            for (size_t i = pending.size(); i-- > 0;)
                if (stream_of[i] == s) {
                    newest = i;
                    break;
                }
            if (newest == SIZE_MAX) continue;
            const CUresult r = query(pending[newest]);
            for (size_t j = 0; j <= newest; ++j) {
                if (stream_of[j] != s) continue;
                if (r == CUDA_SUCCESS) {
                    state[j] = 1;
                    continue;
                }
                const CUresult rj = j == newest ? r : query(pending[j]);
                if (rj == CUDA_ERROR_NOT_READY) break;  // not done: neither is anything later on this stream
                state[j] = rj == CUDA_SUCCESS ? 1 : 2;
            }
        }

        const uint64_t now = now_mono_ns();
        std::deque<Pending> still;
        claim_pending.clear();
        proofs.clear();
        for (size_t i = 0; i < pending.size(); ++i) {
            Pending& e = pending[i];
            // The claim lives in its communicator's runtime, which this entry holds (never freed, not reused).
            if (state[i] != 0 && e.kind == EventKind::Mark)
                e.claim->marks_resolved.fetch_add(1, std::memory_order_relaxed);
            if (state[i] == 1) {
                for (int k = 0; k < e.n; ++k) {
                    if (e.done())
                        batch.done(*file_, e.refs[k], now);
                    else
                        batch.reached(*file_, e.refs[k], now, e.kind != EventKind::Mark);
                }
                if (e.claim) credit(*e.cr, *e.claim, e.followers, e.follower_seq, e.follower_op);
                if (e.profiled_seq) profiler_covered(*e.cr, e.profiled_seq);
                if (e.gen) release(e.claim, e.gen);
                e.pool->free.try_push(e.ev);
                resolve(e);
            } else if (state[i] == 2) {
                // A dead context or a sticky error: the ops stay incomplete, and the watchdog will say so.
                NCW_LOG_ONCE(warn, "cuEventQuery failed: GPU completion tracking is unreliable from here on");
                if (e.gen) release(e.claim, e.gen);
                resolve(e);
            } else {
                // Known not done: this one, or one before it on its stream, answered "not ready" in this pass (the
                // queue holds a stream's events in their stream order: one thread issues on a stream at a time, as
                // NCCL requires of a communicator; the completions above rely on it too).
                if (e.kind == EventKind::Reached || e.kind == EventKind::Mark)
                    proofs.not_reached(*file_, e.refs, e.n);
                else if (e.kind == EventKind::Done && e.n == 1)
                    proofs.not_completed(e.refs[0]);
                if (e.claim) {
                    auto it = std::find_if(claim_pending.begin(), claim_pending.end(),
                                           [&](const auto& cp) { return cp.first == e.claim; });
                    if (it == claim_pending.end())
                        claim_pending.push_back({e.claim, e.followers});
                    else
                        it->second = std::max(it->second, e.followers);
                }
                still.push_back(e);
            }
        }
        pending.swap(still);

        // Streams that fell quiet with followers no pending event covers: one catch-up event after them.
        std::fill(by_slot.begin(), by_slot.end(), nullptr);
        unslotted.clear();
        comms_->for_each([&](CommRuntime& cr) {
            if (cr.slot_index < by_slot.size())
                by_slot[cr.slot_index] = &cr;
            else
                unslotted.push_back(&cr);
            DevicePool* pool = cr.pool.load(std::memory_order_relaxed);
            if (pool) proofs.apply(cr);
            for (auto& c : cr.claims) {
                const uintptr_t key = c.key.load(std::memory_order_acquire);
                if (!key || !pool) continue;
                const uint64_t followers = c.followers.load(std::memory_order_acquire);
                const uint64_t profiled = c.profiled_seq.load(std::memory_order_acquire);
                if (followers <= c.credited.load(std::memory_order_acquire) && profiled <= c.profiled_covered) continue;
                // Torn down (its stream may be gone too): ncclCommDestroy settles its followers itself, and after
                // ncclCommAbort they never completed.
                if (cr.destroyed.load(std::memory_order_acquire)) continue;
                auto it = std::find_if(claim_pending.begin(), claim_pending.end(),
                                       [&](const auto& cp) { return cp.first == &c; });
                if (it != claim_pending.end() && it->second >= followers && profiled <= c.profiled_covered) continue;
                if (!draining && now - c.t_last_issue_ns.load(std::memory_order_relaxed) < kCatchUpAfterNs) continue;
                const CoverResult cover = catch_up(cr, c, pool, reinterpret_cast<cudaStream_t>(key - 1));
                if (cover == CoverResult::Recorded) c.profiled_covered = std::max(c.profiled_covered, profiled);
                if (cover == CoverResult::Refused) {
                    // The stream takes no event from us (another context's stream?): its followers count as done
                    // without proving progress, rather than stalling for ever.
                    NCW_LOG_ONCE(warn,
                                 "cannot record a catch-up event on a stream: ops without their own events on "
                                 "it are counted as done without GPU evidence");
                    batch.followers_done(cr.slot, c.credit_upto(followers), 0, false);
                    if (profiled > c.profiled_covered) profiler_covered(cr, profiled);
                    c.profiled_covered = std::max(c.profiled_covered, profiled);
                    c.covered_op = std::max(c.covered_op, c.follower_op.load(std::memory_order_acquire));
                }
            }
        });

        // Completion times of followers' ring records (best effort). Only records claimed before the previous poll
        // are read (their chunk's thread has mostly written them), and the scan waits at one not written yet, unless
        // the head has gone half a lap past it: its thread then leaves it unwritten (ring_publish.h).
        const uint64_t head = ring_head_prev;
        ring_head_prev = file_->hdr->write_ticket.load(std::memory_order_acquire);
        const uint64_t capacity = uint64_t(file_->ring_mask) + 1;
        if (head > ring_cursor + capacity) ring_cursor = head - capacity;
        for (; ring_cursor < head; ++ring_cursor) {
            const disk::OpRecord& r = file_->ring[ring_cursor & file_->ring_mask];
            if (r.stamp.load(std::memory_order_acquire) != 2 * ring_cursor + 2) {
                const bool pending = r.stamp.load(std::memory_order_acquire) < 2 * ring_cursor + 2;
                if (pending && ring_head_prev <= ring_cursor + capacity / 2) break;  // to be written
                continue;                                                            // overwritten, or left
            }
            if (disk::is_collective(disk::OpType(r.op)) || disk::is_p2p(disk::OpType(r.op))) {
                unstamped.push_back(ring_cursor);
                SyncApply::note_record(r);
            }
        }
        // The host's synchronisations since the last pass (before the followers' stamping: they raise covered_op).
        sync_apply.pass(*file_, *comms_, batch, now);
        size_t keep = 0;
        for (uint64_t t : unstamped) {
            disk::OpRecord& r = file_->ring[t & file_->ring_mask];
            if (r.stamp.load(std::memory_order_acquire) != 2 * t + 2) continue;  // overwritten
            if (r.t_done_ns.load(std::memory_order_relaxed)) continue;           // completed by its own event
            const uint64_t t_return = r.t_return_ns.load(std::memory_order_relaxed);
            const uint8_t flags = r.flags;
            if (t_return && !(flags & disk::kFlagSampledOut)) continue;  // its own events (or none) decide
            // A reused slot's index also names its earlier communicators' records: the comm_id tells them apart.
            CommRuntime* owner = r.comm_slot < by_slot.size() ? by_slot[r.comm_slot] : nullptr;
            if (!owner && r.comm_slot == 0xffff)
                for (CommRuntime* u : unslotted)
                    if (u->comm_id == r.comm_id) owner = u;
            if (owner && owner->comm_id != r.comm_id) owner = nullptr;
            if (t_return && owner) {
                CommRuntime& cr = *owner;
                StreamClaim* c = nullptr;
                for (auto& cl : cr.claims)
                    if (cl.key.load(std::memory_order_relaxed) == uintptr_t(r.stream) + 1) c = &cl;
                if (c && r.op_index <= c->covered_op) {
                    stamp_done(r, now);
                    continue;
                }
                if (!c) continue;  // no claim: never a follower
            } else if (t_return) {
                continue;  // a communicator no longer (or never) in the registry: nothing will cover it
            }
            unstamped[keep++] = t;
        }
        unstamped.resize(keep);

        batch.flush(now);
        for (CommRuntime* cr : resolved) cr->holds.fetch_sub(1);
        resolved.clear();
        pass_.leave();
        passes_.fetch_add(1, std::memory_order_release);
        // Completion times are kept to a few milliseconds; stalls are judged in seconds.
        std::this_thread::sleep_for(std::chrono::milliseconds(draining                               ? 1
                                                              : pending.empty() && unstamped.empty() ? 20
                                                                                                     : 5));
    }
}

// ---- A communicator's teardown: settled with cover events ----

namespace {

// Our driver calls from a user's thread in relaxed capture mode, so that a query cannot invalidate a global-mode
// capture that thread may have going on another stream; and in the pool's context, restored after.
class TeardownCallScope {
public:
    explicit TeardownCallScope(CUcontext ctx) : cu_(cuda_driver()) {
        cu_.cuThreadExchangeStreamCaptureMode(&mode_);
        pushed_ = cu_.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
    }
    ~TeardownCallScope() {
        CUcontext popped;
        if (pushed_) cu_.cuCtxPopCurrent(&popped);
        cu_.cuThreadExchangeStreamCaptureMode(&mode_);
    }
    TeardownCallScope(const TeardownCallScope&) = delete;
    TeardownCallScope& operator=(const TeardownCallScope&) = delete;

private:
    const CudaDriver& cu_;
    CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool pushed_ = false;
};

}  // namespace

CompletionTracker::Settle CompletionTracker::settle_begin(CommRuntime& cr) {
    Settle s;
    s.cr = &cr;
    DevicePool* pool = cr.pool.load(std::memory_order_acquire);
    if (!pool) return s;
    const CudaDriver& cu = cuda_driver();
    TeardownCallScope scope(pool->ctx);
    for (auto& c : cr.claims) {
        const uintptr_t key = c.key.load(std::memory_order_acquire);
        if (!key || c.followers.load(std::memory_order_acquire) <= c.credited.load(std::memory_order_acquire)) continue;
        if (record_cover(cu, pool, c, reinterpret_cast<cudaStream_t>(key - 1), s.e[s.n]) == CoverResult::Recorded)
            ++s.n;
    }
    return s;
}

// The poller's ring scan would give these followers' records their completion time, but a destroyed communicator
// is out of its sight and the process may be gone before its next pass. The cover completed, so every follower
// returned on its stream before it was recorded is complete: the ones this settle credited, and also the ones a
// poller's pass credited (a mark, or a catch-up) whose records its ring scan has not reached yet. Newest first, up
// to `n` and the ring's capacity; stamped now, a bound on when they completed.
void CompletionTracker::stamp_followers(const CommRuntime& cr, cudaStream_t stream, uint64_t follower_op, uint64_t n) {
    const uint64_t head = file_->hdr->write_ticket.load(std::memory_order_acquire);
    const uint64_t capacity = uint64_t(file_->ring_mask) + 1;
    const uint64_t now = now_mono_ns();
    for (uint64_t t = head; n > 0 && t-- > 0 && head - t <= capacity;) {
        disk::OpRecord& r = file_->ring[t & file_->ring_mask];
        if (r.stamp.load(std::memory_order_acquire) != 2 * t + 2) continue;  // being written, or overwritten
        if (r.comm_slot != cr.slot_index || r.comm_id != cr.comm_id ||
            r.stream != uint64_t(reinterpret_cast<uintptr_t>(stream)) || !(r.flags & disk::kFlagSampledOut))
            continue;
        const uint64_t t_return = r.t_return_ns.load(std::memory_order_relaxed);
        if (!t_return || r.op_index > follower_op || r.t_done_ns.load(std::memory_order_relaxed)) continue;
        stamp_done(r, now);
        --n;
    }
}

void CompletionTracker::settle_end(Settle& s) {
    if (!s.n) return;
    const CudaDriver& cu = cuda_driver();
    TeardownCallScope scope(s.e[0].pool->ctx);
    CompletionBatch batch;
    for (int i = 0; i < s.n; ++i) {
        const Cover& e = s.e[i];
        const auto ev = static_cast<CUevent>(e.ev);
        const CUresult r = cu.cuEventQuery(ev);
        if (r == CUDA_SUCCESS) {
            const uint64_t credited = e.claim->credit_upto(e.followers);
            batch.followers_done(s.cr->slot, credited, e.follower_seq);
            if (e.profiled_seq) profiler_covered(*s.cr, e.profiled_seq);
            stamp_followers(*s.cr, e.stream, e.follower_op, e.followers);
            e.pool->free.try_push(ev);
            continue;
        }
        if (r != CUDA_ERROR_NOT_READY) continue;  // a dead context: the followers stay incomplete (as the poller)
        if (impl_->queue.try_push(pending_for(e, s.cr))) catch_ups_.fetch_add(1, std::memory_order_relaxed);
    }
    batch.flush(now_mono_ns());
    s.n = 0;
}

}  // namespace ncw

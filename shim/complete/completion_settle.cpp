// Events that cover a stream's followers (completion_internal.h), and a communicator's teardown settle with them.
#include <algorithm>
#include <cstdint>

#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/complete/completion_internal.h"
#include "shim/record/recorder.h"

namespace ncw {
namespace completion {

bool capturing_now(const CudaDriver& cu, cudaStream_t stream) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return cu.cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &st) != CUDA_SUCCESS ||
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

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
    out.t_mark = now_mono_ns();
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

Pending pending_for(const CompletionTracker::Cover& cv, CommRuntime* cr) {
    Pending p;
    p.ev = static_cast<CUevent>(cv.ev);
    p.pool = cv.pool;
    p.stream = cv.stream;
    p.cr = cr;
    p.claim = cv.claim;
    p.followers = cv.followers;
    p.follower_seq = cv.follower_seq;
    p.t_mark = cv.t_mark;
    p.kind = CompletionTracker::EventKind::DoneLate;  // after followers, perhaps long after: proves nothing pending
    return p;
}

}  // namespace completion

using namespace completion;

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
void CompletionTracker::stamp_followers(const CommRuntime& cr, cudaStream_t stream, uint64_t t_mark, uint64_t n) {
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
        if (!t_return || t_return >= t_mark || r.t_done_ns.load(std::memory_order_relaxed)) continue;
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
            stamp_followers(*s.cr, e.stream, e.t_mark, e.followers);
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

#include "completion_tracker.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "clock.h"
#include "cuda_driver.h"
#include "log.h"
#include "recorder.h"

namespace ncw {

// One device's primary context and its free events.
struct DevicePool {
    int dev = -1;
    CUcontext ctx = nullptr;
    MpmcQueue<CUevent> free{kEventsPerDevice};
    static constexpr size_t kEventsPerDevice = 1024;
};

namespace {

struct Pending {
    CUevent ev = nullptr;  // nullptr: followers (ops without events of their own)
    DevicePool* pool = nullptr;
    cudaStream_t stream = nullptr;
    StreamClaim* claim = nullptr;  // a sampled op's completed event releases it once resolved
    uint64_t gen = 0;
    uint64_t t_mark = 0;  // event: just before it was recorded; followers: after their enqueue returned
    bool done = false;    // completion event (else "reached"); a catch-up event is a completion event with n == 0
    int n = 0;
    OpRef refs[CompletionTracker::kMaxRefs];
};

constexpr size_t kQueueCapacity = 8192;
// Entries the poller holds at most; beyond it the queue fills and new ops fall back to completion-on-return. Reached
// only when a stream is stuck while its host thread keeps issuing.
constexpr size_t kMaxPending = 16384;
constexpr int kMaxDevices = 64;

}  // namespace

struct CompletionTracker::Impl {
    MpmcQueue<Pending> queue{kQueueCapacity};
    std::mutex pools_mu;  // only pool creation, at communicator registration
    DevicePool* pools[kMaxDevices] = {};
};

CompletionTracker::CompletionTracker(const RankFileWriter* file) : impl_(new Impl), file_(file) {}

CompletionTracker* CompletionTracker::create(const Config& cfg, const RankFileWriter* file) {
    if (!cfg.gpu_events) return nullptr;
    if (!cuda_driver().ok) return nullptr;
    return new CompletionTracker(file);  // never freed: its thread may outlive static destruction at exit
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
    if (cuda_driver().cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &st) != CUDA_SUCCESS) return false;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool CompletionTracker::record(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, bool done,
                               StreamClaim* claim, uint64_t gen) {
    if (!pool || n <= 0) return false;
    Pending p;
    if (!pool->free.try_pop(p.ev)) {
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    p.t_mark = now_mono_ns();
    if (cuda_driver().cuEventRecord(p.ev, reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
        pool->free.try_push(p.ev);
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    p.pool = pool;
    p.stream = stream;
    p.claim = claim;
    p.gen = gen;
    p.done = done;
    p.n = n < kMaxRefs ? n : kMaxRefs;
    for (int i = 0; i < p.n; ++i) p.refs[i] = refs[i];
    if (!impl_->queue.try_push(p)) {
        // The event is recorded but nobody will query it: give it back later is impossible without a queue slot,
        // so it is leaked (bounded by how often the queue is full, which a poller that keeps up never lets happen).
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    recorded_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool CompletionTracker::follow(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, uint64_t t_return_ns) {
    if (!pool || n <= 0) return false;
    Pending p;
    p.pool = pool;
    p.stream = stream;
    p.t_mark = t_return_ns;
    p.done = true;
    p.n = n < kMaxRefs ? n : kMaxRefs;
    for (int i = 0; i < p.n; ++i) p.refs[i] = refs[i];
    if (!impl_->queue.try_push(p)) {
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    followed_.fetch_add(1, std::memory_order_relaxed);
    return true;
}

namespace {

// One stream of the pending entries: (pool, stream) identifies it, whatever communicator recorded on it.
struct StreamState {
    DevicePool* pool = nullptr;
    cudaStream_t stream = nullptr;
    uint64_t covered = 0;       // work enqueued before this time is complete (newest completed event's t_mark)
    uint64_t newest_event = 0;  // t_mark of the newest event still pending
    uint64_t tail = 0;          // t_mark of the newest follower still pending
    bool dead_comm = false;     // a follower's communicator was destroyed: nothing more may be recorded for it
};

}  // namespace

void CompletionTracker::poll_forever() {
    const CudaDriver& cu = cuda_driver();
    // PyTorch captures CUDA graphs in global mode, in which a query from another thread would invalidate the
    // capture; a relaxed thread is allowed to query.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cu.cuThreadExchangeStreamCaptureMode(&mode);
    std::deque<Pending> pending;
    std::vector<StreamState> streams;
    std::vector<uint16_t> stream_of;  // per pending entry: its index in `streams`
    std::vector<uint8_t> state;       // per pending entry: 0 not known done, 1 complete, 2 failed
    CUcontext current = nullptr;
    auto use_ctx = [&](DevicePool* pool) {
        if (pool->ctx != current && cu.cuCtxSetCurrent(pool->ctx) == CUDA_SUCCESS) current = pool->ctx;
    };
    auto query = [&](Pending& p) {
        use_ctx(p.pool);
        return cu.cuEventQuery(p.ev);
    };
    CompletionBatch batch;
    auto done_refs = [&](const Pending& e, uint64_t now, bool progress) {
        for (int k = 0; k < e.n; ++k) batch.done(*file_, e.refs[k], now, progress);
    };
    auto capturing_now = [&](cudaStream_t stream) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        return cu.cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &st) != CUDA_SUCCESS ||
               st != CU_STREAM_CAPTURE_STATUS_NONE;
    };
    // 1: a catch-up event is pending on the stream; 0: not now (no free event, or the stream is being captured: an
    // event recorded into a capture must never be queried, and nothing of ours may join a user's graph); -1: the
    // stream refuses our events.
    auto catch_up = [&](const StreamState& st) {
        Pending c;
        if (!st.pool->free.try_pop(c.ev)) return 0;
        use_ctx(st.pool);
        if (capturing_now(st.stream)) {
            st.pool->free.try_push(c.ev);
            return 0;
        }
        c.t_mark = now_mono_ns();
        if (cu.cuEventRecord(c.ev, reinterpret_cast<CUstream>(st.stream)) != CUDA_SUCCESS) {
            st.pool->free.try_push(c.ev);
            return -1;
        }
        // A capture that began between the check and the record may hold the record: never query that event (a
        // later record outside any capture re-arms it, so it can go back to the pool).
        if (capturing_now(st.stream)) {
            st.pool->free.try_push(c.ev);
            return 0;
        }
        c.pool = st.pool;
        c.stream = st.stream;
        c.done = true;
        pending.push_back(c);
        catch_ups_.fetch_add(1, std::memory_order_relaxed);
        return 1;
    };
    for (;;) {
        last_poll_ns_.store(now_mono_ns(), std::memory_order_relaxed);
        Pending p;
        while (pending.size() < kMaxPending && impl_->queue.try_pop(p)) pending.push_back(p);

        streams.clear();
        stream_of.assign(pending.size(), 0);
        for (size_t i = 0; i < pending.size(); ++i) {
            size_t s = 0;
            while (s < streams.size() && (streams[s].pool != pending[i].pool || streams[s].stream != pending[i].stream))
                ++s;
            if (s == streams.size()) streams.push_back(StreamState{pending[i].pool, pending[i].stream});
            stream_of[i] = uint16_t(s);
        }

        // Events on one stream complete in order: if a stream's newest event is done, so are all before it, and one
        // query serves them all. Otherwise walk that stream from its oldest until one is not done yet. This keeps our
        // driver calls (which share locks with the training thread's launches) to about one per stream.
        state.assign(pending.size(), 0);
        for (size_t s = 0; s < streams.size(); ++s) {
            size_t newest = SIZE_MAX;
            for (size_t i = pending.size(); i-- > 0;)
                if (stream_of[i] == s && pending[i].ev) {
                    newest = i;
                    break;
                }
            if (newest == SIZE_MAX) continue;
            const CUresult r = query(pending[newest]);
            for (size_t j = 0; j <= newest; ++j) {
                if (stream_of[j] != s || !pending[j].ev) continue;
                if (r == CUDA_SUCCESS) {
                    state[j] = 1;
                    continue;
                }
                const CUresult rj = j == newest ? r : query(pending[j]);
                if (rj == CUDA_ERROR_NOT_READY) break;  // not done: neither is anything later on this stream
                state[j] = rj == CUDA_SUCCESS ? 1 : 2;
            }
        }
        for (size_t i = 0; i < pending.size(); ++i)
            if (state[i] == 1)
                streams[stream_of[i]].covered = std::max(streams[stream_of[i]].covered, pending[i].t_mark);

        const uint64_t now = now_mono_ns();
        std::deque<Pending> still;
        for (size_t i = 0; i < pending.size(); ++i) {
            Pending& e = pending[i];
            StreamState& st = streams[stream_of[i]];
            if (!e.ev) {
                // Followers: done once an event recorded on their stream after their enqueue is done.
                if (e.n == 0) {
                    // resolved already (see below)
                } else if (e.t_mark < st.covered) {
                    done_refs(e, now, true);
                } else if (e.refs[0].cr->destroyed.load(std::memory_order_acquire)) {
                    st.dead_comm = true;  // its stream may be gone too: no catch-up on it
                    done_refs(e, now, false);
                } else {
                    st.tail = std::max(st.tail, e.t_mark);
                    still.push_back(e);
                }
                continue;
            }
            if (state[i] == 1) {
                for (int k = 0; k < e.n; ++k) {
                    if (e.done)
                        batch.done(*file_, e.refs[k], now);
                    else
                        batch.reached(*file_, e.refs[k], now);
                }
                release(e.claim, e.gen);
                e.pool->free.try_push(e.ev);
            } else if (state[i] == 2) {
                // A dead context or a sticky error: the ops stay incomplete, and the watchdog will say so.
                NCW_LOG_ONCE(warn, "cuEventQuery failed: GPU completion tracking is unreliable from here on");
                release(e.claim, e.gen);
            } else {
                st.newest_event = std::max(st.newest_event, e.t_mark);
                still.push_back(e);
            }
        }
        pending.swap(still);

        // A stream that fell quiet with followers no pending event covers: one catch-up event after them.
        for (StreamState& st : streams) {
            if (!st.tail || st.dead_comm || st.newest_event > st.tail || now - st.tail < kCatchUpAfterNs) continue;
            if (catch_up(st) < 0) {
                // The stream takes no event from us (another context's stream?): its followers count as done
                // without proving progress, rather than stalling for ever.
                NCW_LOG_ONCE(warn,
                             "cannot record a catch-up event on a stream: ops without their own events on it "
                             "are counted as done without GPU evidence");
                for (Pending& e : pending) {
                    if (e.ev || e.pool != st.pool || e.stream != st.stream) continue;
                    for (int k = 0; k < e.n; ++k) record_add_flags(*file_, e.refs[k], disk::kFlagUntracked);
                    done_refs(e, now, false);
                    e.n = 0;
                    e.t_mark = 0;  // resolved: dropped at the next poll (covered by anything)
                }
            }
        }
        batch.flush(now);
        // Completion times are kept to a few milliseconds; stalls are judged in seconds.
        std::this_thread::sleep_for(std::chrono::milliseconds(pending.empty() ? 20 : 5));
    }
}

}  // namespace ncw

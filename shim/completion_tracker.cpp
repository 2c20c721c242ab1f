#include "completion_tracker.h"

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
    CUevent ev = nullptr;
    DevicePool* pool = nullptr;
    cudaStream_t stream = nullptr;
    bool done = false;  // completion event (else "reached")
    int n = 0;
    OpRef refs[CompletionTracker::kMaxRefs];
};

constexpr size_t kQueueCapacity = 8192;
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

bool CompletionTracker::record(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, bool done) {
    if (!pool || n <= 0) return false;
    Pending p;
    if (!pool->free.try_pop(p.ev)) {
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    if (cuda_driver().cuEventRecord(p.ev, reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
        pool->free.try_push(p.ev);
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    p.pool = pool;
    p.stream = stream;
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

void CompletionTracker::poll_forever() {
    const CudaDriver& cu = cuda_driver();
    // PyTorch captures CUDA graphs in global mode, in which a query from another thread would invalidate the
    // capture; a relaxed thread is allowed to query.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cu.cuThreadExchangeStreamCaptureMode(&mode);
    std::deque<Pending> pending;
    CUcontext current = nullptr;
    auto query = [&](Pending& p) {
        if (p.pool->ctx != current && cu.cuCtxSetCurrent(p.pool->ctx) == CUDA_SUCCESS) current = p.pool->ctx;
        return cu.cuEventQuery(p.ev);
    };
    std::vector<uint8_t> state;  // per pending entry: 0 unknown, 1 complete, 2 failed
    for (;;) {
        last_poll_ns_.store(now_mono_ns(), std::memory_order_relaxed);
        Pending p;
        while (impl_->queue.try_pop(p)) pending.push_back(p);
        state.assign(pending.size(), 0);
        // Events on one stream complete in order: if a stream's newest event is done, so are all before it, and
        // one query serves them all. Otherwise walk that stream from its oldest until one is not done yet. This
        // keeps our driver calls (which share locks with the training thread's launches) to about one per stream.
        for (size_t i = pending.size(); i-- > 0;) {
            if (state[i]) continue;
            const Pending& newest = pending[i];
            auto same = [&](size_t j) { return pending[j].pool == newest.pool && pending[j].stream == newest.stream; };
            CUresult r = query(pending[i]);
            if (r == CUDA_SUCCESS) {
                for (size_t j = 0; j <= i; ++j)
                    if (!state[j] && same(j)) state[j] = 1;
                continue;
            }
            for (size_t j = 0; j <= i; ++j) {
                if (state[j] || !same(j)) continue;
                CUresult rj = j == i ? r : query(pending[j]);
                if (rj == CUDA_ERROR_NOT_READY) {
                    // Not done: neither is anything later on this stream.
                    for (size_t k = j; k <= i; ++k)
                        if (!state[k] && same(k)) state[k] = 3;
                    break;
                }
                state[j] = rj == CUDA_SUCCESS ? 1 : 2;
            }
        }
        uint64_t now = now_mono_ns();
        std::deque<Pending> still;
        for (size_t i = 0; i < pending.size(); ++i) {
            Pending& e = pending[i];
            if (state[i] == 1) {
                for (int k = 0; k < e.n; ++k) {
                    if (e.done)
                        record_done(*file_, e.refs[k], now);
                    else
                        record_reached(*file_, e.refs[k], now);
                }
                e.pool->free.try_push(e.ev);
            } else if (state[i] == 2) {
                // A dead context or a sticky error: the ops stay incomplete, and the watchdog will say so.
                NCW_LOG_ONCE(warn, "cuEventQuery failed: GPU completion tracking is unreliable from here on");
            } else {
                still.push_back(e);
            }
        }
        pending.swap(still);
        // Completion times are kept to a few milliseconds; stalls are judged in seconds.
        std::this_thread::sleep_for(std::chrono::milliseconds(pending.empty() ? 20 : 5));
    }
}

}  // namespace ncw

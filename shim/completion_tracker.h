// GPU completion without blocking anyone: the wrapper records a pooled CUDA event on the operation's stream (after
// the enqueue: "completed"; before it: "reached", meaning all earlier work on that stream is done) and hands it to a
// queue; a thread of ours polls the events and advances the progress block. Events come from a fixed pool per
// device; when the pool or the queue is exhausted the wrapper falls back to completion-on-return for that op.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>

#include "comm_registry.h"
#include "config.h"
#include "rank_file_writer.h"

namespace ncw {

class CompletionTracker {
public:
    static constexpr int kMaxRefs = 8;  // ops covered by one event (a group launch is split over several)

    // nullptr when GPU tracking is off or impossible (no libcuda in the process).
    static CompletionTracker* create(const Config& cfg, const RankFileWriter* file);

    // At communicator registration (not the hot path): the event pool of the communicator's device.
    DevicePool* pool_for_device(int dev);

    // Hot path.
    bool capturing(cudaStream_t stream) const;
    bool record(DevicePool* pool, cudaStream_t stream, const OpRef* refs, int n, bool done);

    uint64_t events_recorded() const { return recorded_.load(std::memory_order_relaxed); }
    uint64_t fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }
    uint64_t last_poll_ns() const { return last_poll_ns_.load(std::memory_order_relaxed); }

    void poll_forever();  // the tracker thread's body

private:
    explicit CompletionTracker(const RankFileWriter* file);
    struct Impl;
    Impl* impl_;
    const RankFileWriter* file_;
    std::atomic<uint64_t> recorded_{0};
    std::atomic<uint64_t> fallbacks_{0};
    std::atomic<uint64_t> last_poll_ns_{0};
};

}  // namespace ncw

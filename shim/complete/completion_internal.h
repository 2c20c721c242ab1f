// Inside the completion tracker (completion_tracker.cpp: record and the poller; completion_settle.cpp: events that
// cover a stream's followers, for the poller's catch-up and a communicator's teardown): what an event in flight is,
// and the device pools. Not for other units.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>

#include "shim/base/cuda_driver.h"
#include "shim/base/mpmc_queue.h"
#include "shim/complete/completion_tracker.h"

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
    uint64_t t_mark = 0;  // just before the record
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

namespace completion {

// A stream whose capture status cannot be had counts as captured: nothing of ours may join a user's graph.
bool capturing_now(const CudaDriver& cu, cudaStream_t stream);

enum class CoverResult { Recorded, NotNow, Refused };

// One event on `stream` after the claim's followers counted so far (the caller has the pool's context current).
// NotNow: no free event, or the stream is being captured (an event recorded into a capture must never be queried);
// Refused: the stream takes no event from us.
CoverResult record_cover(const CudaDriver& cu, DevicePool* pool, StreamClaim& c, cudaStream_t stream,
                         CompletionTracker::Cover& out);

// A cover event for the poller to query: a completion event of no op of its own.
Pending pending_for(const CompletionTracker::Cover& cv, CommRuntime* cr);

}  // namespace completion
}  // namespace ncw

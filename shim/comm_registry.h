// What the shim knows about each communicator in this process, and the lock-free map from ncclComm_t to it.
// CommRuntime objects are never freed: a wrapper or one of our threads may still hold one while the communicator
// is destroyed, and NCCL may hand the same pointer to a later communicator (the map entry is then replaced).
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>

#include "mpmc_queue.h"
#include "ncclwatch/format.h"

namespace ncw {

struct DevicePool;
struct ProfilerLink;

// An operation that waits for a GPU event: enough to find its record and its progress counters again.
struct OpRef {
    struct CommRuntime* cr = nullptr;
    uint64_t ticket = 0;    // ring ticket of the record
    uint64_t coll_seq = 0;  // 0 for p2p
    uint64_t op_index = 0;
};

// A nonblocking communicator's operation whose completion event must wait until NCCL has enqueued it.
struct DeferredOp {
    OpRef ref;
    cudaStream_t stream = nullptr;
};

// One stream a communicator's ops run on, for sampling (NCCLWATCH_GPU_SAMPLE=auto): at most one op per stream at a
// time carries GPU events of its own (the "sampled" op); the ops issued while it is in flight follow it: they are only
// counted here, and complete when an event recorded on the stream after they were counted completes (stream order).
// Why: every event recorded between two NCCL kernels costs about half a microsecond on the issuing thread and on the
// GPU, and a queue entry per op costs the issuing thread a cache-line transfer; a counter in a line it owns costs
// nothing.
struct StreamClaim {
    static constexpr uint64_t kPauseNs = 1000000;  // an op after a pause this long is sampled...
    static constexpr uint32_t kMaxSamples = 4;     // ...unless this many samples are in flight (a stuck stream)
    // Written by the issuing threads.
    std::atomic<uintptr_t> key{0};             // the stream handle + 1; 0 = free entry
    std::atomic<uint64_t> owner{0};            // generation of the newest sampled op in flight; 0 = none
    std::atomic<uint32_t> samples{0};          // sampled ops in flight
    std::atomic<uint64_t> t_last_issue_ns{0};  // the last op issued on this stream (any thread)
    std::atomic<uint64_t> followers{0};        // ops that followed, counted once their call returned (enqueued)
    std::atomic<uint64_t> follower_seq{0};     // the highest collective sequence number among them
    // The completion poller's, on a line of their own (`credited` is also raised once by a teardown call).
    alignas(64) std::atomic<uint64_t> credited{0};  // followers counted as completed
    uint64_t covered_ns = 0;                        // work enqueued on the stream before this time is complete

    // Raises `credited` to n; returns how many followers that newly credits (zero if another thread got there).
    uint64_t credit_upto(uint64_t n) {
        uint64_t cur = credited.load(std::memory_order_acquire);
        while (cur < n && !credited.compare_exchange_weak(cur, n, std::memory_order_acq_rel)) {
        }
        return cur < n ? n - cur : 0;
    }
};

struct CommRuntime {
    ncclComm_t comm = nullptr;
    uint64_t comm_id = 0;
    int rank = -1;
    int nranks = 0;
    int cuda_dev = -1;
    bool nonblocking = false;
    // The progress block: a slot of the file's comm table, or (table full, or after destroy) one of our own in
    // memory that no reader sees. Atomic: a destroy detaches it (comm_slots.h) while our threads may still write.
    std::atomic<disk::CommSlot*> slot{nullptr};
    uint16_t slot_index = 0xffff;  // in the file's table; 0xffff: none (OpRecord::comm_slot)
    // GPU events for this communicator's device; nullptr without CUDA or until the device is known.
    std::atomic<DevicePool*> pool{nullptr};

    // Sequence counters for a communicator without a comm slot (the file's table is full); otherwise the slot's
    // coll_issued / ops_issued are the counters.
    std::atomic<uint64_t> coll_seq{0};
    std::atomic<uint64_t> op_index{0};
    std::atomic<uint64_t> split_counter{0};
    uint32_t peer_slots = 0;  // p2p sequence numbers per peer: send_seq[peer % peer_slots]
    std::atomic<uint64_t>* send_seq = nullptr;
    std::atomic<uint64_t>* recv_seq = nullptr;
    // NCCL's own sequence number of the next collective of each kind (its comm->seqNumber[func]; index: OpType), and
    // the communicator's link to NCCL's profiler events once NCCL initialised our plugin for it (profiler_link.h).
    std::atomic<uint64_t> nccl_seq[16] = {};
    std::atomic<ProfilerLink*> prof{nullptr};
    std::atomic<bool> destroyed{false};
    std::atomic<uint64_t> failed_ops{0};        // calls that returned an error: a stall ending this way did not recover
    std::atomic<bool> identity_pending{false};  // rank/nranks not known yet (nonblocking split): the watchdog asks
    MpmcQueue<DeferredOp> deferred{256};

    // Streams this communicator's ops ran on. A fifth stream, or the per-thread default stream (whose meaning depends
    // on the calling thread, so our poller cannot record on it), gets no entry: its ops are always sampled.
    static constexpr int kClaims = 4;
    StreamClaim claims[kClaims];
    StreamClaim* claim_for(cudaStream_t stream) {
        const uintptr_t key = reinterpret_cast<uintptr_t>(stream) + 1;
        if (key == kPerThreadStreamKey) return nullptr;
        for (auto& c : claims) {
            uintptr_t k = c.key.load(std::memory_order_acquire);
            if (k == 0 && c.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) return &c;
            if (k == key) return &c;
        }
        return nullptr;
    }
    static constexpr uintptr_t kPerThreadStreamKey = 0x2 + 1;  // cudaStreamPerThread
};

class CommRegistry {
public:
    static constexpr size_t kCapacity = 4096;  // power of two; more live communicators than this are not tracked

    bool insert(ncclComm_t comm, CommRuntime* cr);
    CommRuntime* find(ncclComm_t comm) const {
        uintptr_t key = reinterpret_cast<uintptr_t>(comm);
        if (!key) return nullptr;
        size_t i = hash(key);
        for (size_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
            uintptr_t k = keys_[i].load(std::memory_order_acquire);
            if (k == key) return values_[i].load(std::memory_order_acquire);
            if (k == 0) return nullptr;
        }
        return nullptr;
    }
    void remove(ncclComm_t comm);  // the key stays (a tombstone with no value) so probing still works

    // Visits every live entry; for the watchdog.
    template <typename F>
    void for_each(F&& f) const {
        for (size_t i = 0; i < kCapacity; ++i)
            if (CommRuntime* cr = values_[i].load(std::memory_order_acquire)) f(*cr);
    }

private:
    static size_t hash(uintptr_t k) { return (k >> 4) * 0x9E3779B97F4A7C15ull >> 52 & (kCapacity - 1); }
    std::atomic<uintptr_t> keys_[kCapacity] = {};
    std::atomic<CommRuntime*> values_[kCapacity] = {};
};

}  // namespace ncw

// What the shim knows about each communicator in this process, and the lock-free map from ncclComm_t to it.
// CommRuntime objects are never freed: a wrapper or one of our threads may still hold one while the communicator
// is destroyed, and NCCL may hand the same pointer to a later communicator (the map entry is then replaced). A
// destroyed communicator's object is made new for a later one once nothing of ours can still reach it (comm_pool.h):
// a rank's memory follows the communicators alive, not those ever made.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ncclwatch/format.h"
#include "shim/base/mpmc_queue.h"

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
//
// Marks, for CPU run-ahead: a framework may enqueue many steps of ops before the GPU starts the first (torch: 20
// steps' all_reduces within milliseconds). The sampled op's events then sit behind its first op, and a catch-up
// event (recorded once the stream is quiet) behind the last: with the GPU stuck in op #20 after finishing #3..#19,
// nothing in between could say so. So a follower also gets a "mark" every kMarkEveryOps followers since the stream's
// last mark or sample, and so does every op of kMarkEveryElems elements or more: one event recorded just before it.
// Done, it proves every op counted before it complete and its own op reached (its record's time; coll_reached only
// rises to the ops before it, so that reached > completed keeps meaning "seen inside reached": nothing proves a mark's
// op not completed); pending, it proves its op not reached (so not completed either). The GPU's last completed op c is
// then never more than kMarkEveryOps - 1 ops ahead of "completed" (c - 15 <= completed <= c), at one event per
// kMarkEveryOps small ops (the event's ~0.2 us of GPU and CPU time spread over them), or per large op, whose GPU
// time dwarfs it. Spacing by time since the last mark was not chosen: under run-ahead the CPU's issue
// times say nothing about how much GPU work lies between two marks. A mark is one event, not a sampled op's two: on
// a burst's boundary it gives both sides (completed up to the op before, this one reached or proven not), at half the
// cost. Marks in flight are bounded: the spacing doubles for every kMarksPerDoubling of them pending on the stream
// (so the bound above holds while fewer are; a run-ahead of D ops costs about 16 log2(D / 256) marks, densest at the
// oldest, where the GPU is), and none past kMaxMarks (the device's event pool is shared).
struct StreamClaim {
    static constexpr uint64_t kPauseNs = 1000000;  // an op after a pause this long is sampled...
    static constexpr uint32_t kMaxSamples = 4;     // ...unless this many samples are in flight (a stuck stream)
    static constexpr uint64_t kMarkEveryOps = 16;
    static constexpr uint64_t kMarkEveryElems = uint64_t(1) << 23;
    static constexpr uint32_t kMarksPerDoubling = 16;
    static constexpr uint32_t kMaxMarks = 64;
    // Written by the issuing threads (one line).
    std::atomic<uintptr_t> key{0};             // the stream handle + 1; 0 = free entry
    std::atomic<uint64_t> owner{0};            // generation of the newest sampled op in flight; 0 = none
    std::atomic<uint32_t> samples{0};          // sampled ops in flight
    std::atomic<uint32_t> marks{0};            // marks recorded so far (wraps; minus marks_resolved: in flight)
    std::atomic<uint64_t> t_last_issue_ns{0};  // the last op issued on this stream (any thread)
    std::atomic<uint64_t> followers{0};        // ops that followed, counted once their call returned (enqueued)
    std::atomic<uint64_t> follower_seq{0};     // the highest collective sequence number among them
    std::atomic<uint64_t> follower_op{0};      // and their highest op_index (written before the count)
    std::atomic<uint64_t> mark_due_at{0};      // `followers` from which a mark is looked at again
    // The completion poller's, on a line of their own (`credited` is also raised once by a teardown call).
    alignas(64) std::atomic<uint64_t> credited{0};  // followers counted as completed
    uint64_t profiled_covered = 0;                  // the poller's: the highest profiled_seq a catch-up covered
    // Collectives NCCL's profiler completes (profiler_link.h) issued on this stream: the highest one whose call
    // returned. Not followers (the profiler counts them once, as it completes them); a catch-up event after them, once
    // the stream is quiet, tells the profiler that they are done (the last op before a pause, whose algorithm's
    // stops prove nothing). Written by the issuing thread, on this line: the poller reads it once a pass.
    std::atomic<uint64_t> profiled_seq{0};
    // Followers up to this op_index are complete (the poller's: the highest follower_op a done event covered). Their
    // ring records are told apart by it, not by time, so that no follower's return needs a clock read.
    uint64_t covered_op = 0;
    std::atomic<uint32_t> marks_resolved{0};  // marks whose event completed or failed (or was never queued)
    // `followers` at the stream's last mark or sample: the issuing thread's, but only at a mark or a sample.
    std::atomic<uint64_t> mark_followers{0};

    // Raises `credited` to n; returns how many followers that newly credits (zero if another thread got there).
    uint64_t credit_upto(uint64_t n) {
        uint64_t cur = credited.load(std::memory_order_acquire);
        while (cur < n && !credited.compare_exchange_weak(cur, n, std::memory_order_acq_rel)) {
        }
        return cur < n ? n - cur : 0;
    }

    // Hot path, for an op that follows (`count`: its elements; 0 for a group's chunk): whether it gets a mark. Two
    // loads and two compares until one is due; only then is the poller's line read, and a mark refused (thinning,
    // the cap) moves the next look kMarkEveryOps further, so that a stream at the cap pays no more per op. Racing
    // issuers on one stream may place a mark more or fewer: the spacing is a cost bound, never a proof.
    bool mark_due(uint64_t count) {
        if (__builtin_expect(followers.load(std::memory_order_relaxed) < mark_due_at.load(std::memory_order_relaxed) &&
                                 count < kMarkEveryElems,
                             1))
            return false;
        return mark_due_slow(count);
    }
    bool mark_due_slow(uint64_t count) __attribute__((noinline, cold));  // comm_registry.cpp
    // The spacing starts again (a mark or a sampled op, whose "reached" event serves as one).
    void restart_marks(uint64_t f) {
        mark_followers.store(f, std::memory_order_relaxed);
        mark_due_at.store(f + kMarkEveryOps, std::memory_order_relaxed);
    }
    // A mark that got no event (pool empty, queue full): not in flight.
    void mark_dropped() { marks_resolved.fetch_add(1, std::memory_order_relaxed); }
};
static_assert(offsetof(StreamClaim, credited) == 64, "the issuing threads' fields fill one cache line");

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

    // Its reuse for a later communicator (comm_pool.h). `life` counts the lives of this object (1: its first): whoever
    // keeps the pointer past our threads' passes without a hold (a CUDA graph's captured op) keeps the life with it
    // and checks it, so that a later communicator is never taken for the one it captured. `holds`: references of our
    // threads that outlive a pass (the poller's pending events, the watchdog's watch of it); none may be held at reuse.
    std::atomic<uint64_t> life{1};
    std::atomic<uint32_t> holds{0};
    // Kept from one life to the next, so that a reuse allocates nothing: a progress block of its own (the slot of a
    // communicator without a file slot, or the private copy a destroyed one writes into once its file slot went to
    // another: comm_slots.h), and the allocated length of send_seq / recv_seq.
    disk::CommSlot* own_slot = nullptr;
    uint32_t peer_capacity = 0;

    // Made new in place for its next life (comm_pool.h; no thread of ours may reach it): every member as a new
    // object's, but `life` one more and the buffers above kept (their contents are the next life's to reset).
    void renew();
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

// Reuse of destroyed communicators' CommRuntime objects (issue 45). Each communicator made and destroyed kept about
// 33 KB (its runtime, the queue of its deferred ops, its per-peer counters, the private copy of its slot): a framework
// that makes groups per step or per checkpoint grew by hundreds of MB a rank. A retired runtime now waits here until
// nothing of ours can reach it, then serves a later communicator, made new in place (CommRuntime::renew): memory
// follows the communicators alive, plus this bounded quarantine. Made new rather than freed, so that a pointer of
// ours that outlived every guard below still reads a CommRuntime (whose life tells it apart), never freed memory.
//
// Who may still reach a retired runtime, and what its reuse waits for (never waited on: an init that finds none ready
// makes a new one, as before):
//  - a pass of one of our threads that found it before it left the registry or the slot table's list (the watchdog's
//    short walks of the registry, the digest client's read of the communicators without a file slot): that pass over
//    (PassCounter; the watchdog holds what it keeps past a walk, so that no reuse waits for its analyses);
//  - the completion poller, which also takes the events queued before its pass began: a whole pass of it that began
//    after the retirement;
//  - a reference of ours that outlives a pass (the poller's pending events, the watchdog's watch of the communicator):
//    CommRuntime::holds back to zero;
//  - NCCL's profiler plugin, until NCCL finalizes its context (CommRuntime::prof back to nullptr);
//  - the slot table, until the released file slot is detached, which writes into the runtime (SlotTable::refers_to);
//  - a host thread's walk of the registry (refresh_pending_identities, several at once): none under way any more;
//  - a CUDA graph's captured op, which outlives everything: it checks the runtime's life.
// The host program's threads: NCCL allows no call on a communicator concurrent with its ncclCommDestroy, and none
// after it. ncclCommAbort does end calls still inside NCCL on other threads, whose wrappers then write to the runtime:
// an aborted communicator's runtime is not retired, and is never reused (aborts are an error path, not a churn).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"

namespace ncw {

class CommPool {
public:
    // Retired runtimes that wait for our threads; past this many the oldest is let go: it stays allocated, never
    // reused (a thread of ours that stopped passing, a GPU that never completes its last events).
    static constexpr uint32_t kQuarantine = 256;
    // Our threads that read communicators in passes. The poller's passes also take what was queued before them.
    enum Reader : int { kPoller, kWatchdog, kDigest, kReaders };

    void watch_passes(Reader r, const PassCounter* c) { passes_[r] = c; }

    // At init (the host's thread, not the hot path): a retired runtime nothing of ours can reach any more, made new,
    // or else a new one (std::bad_alloc is the caller's, as for any init bookkeeping).
    CommRuntime* take(SlotTable& slots);
    // After ncclCommDestroy, or an init that failed: cr is out of the registry, its final state written and its slot
    // released. It is no longer in the slot table's list of communicators without a file slot from here on.
    void retire(CommRuntime& cr, SlotTable& slots);

    // A host thread's walk of the registry (not the hot path): a runtime retired while one is under way is reused only
    // once none is.
    class HostWalk {
    public:
        explicit HostWalk(CommPool& p) : p_(p) { p_.host_walks_.fetch_add(1); }
        ~HostWalk() { p_.host_walks_.fetch_sub(1); }
        HostWalk(const HostWalk&) = delete;
        HostWalk& operator=(const HostWalk&) = delete;

    private:
        CommPool& p_;
    };

    // For the tests and the logs.
    uint64_t made() const { return made_.load(std::memory_order_relaxed); }      // runtimes ever allocated
    uint64_t reused() const { return reused_.load(std::memory_order_relaxed); }  // takes served by a retired one
    uint64_t let_go() const { return let_go_.load(std::memory_order_relaxed); }  // dropped from a full quarantine
    uint32_t waiting() const { return waiting_n_.load(std::memory_order_relaxed); }

private:
    struct Retired {
        CommRuntime* cr = nullptr;
        uint64_t marks[kReaders] = {};  // each reader's pass counter just after the retirement
        bool host_walk = false;         // a host thread's walk was under way then (until none is seen)
    };
    bool ready(Retired& r);  // clears r.host_walk once it sees no walk under way
    void drop(uint32_t i);

    std::mutex mu_;  // init and destroy only, never per op
    Retired waiting_[kQuarantine];
    uint32_t n_ = 0;  // oldest first
    const PassCounter* passes_[kReaders] = {};
    std::atomic<uint32_t> waiting_n_{0};
    std::atomic<int> host_walks_{0};
    std::atomic<uint64_t> made_{0};
    std::atomic<uint64_t> reused_{0};
    std::atomic<uint64_t> let_go_{0};
};

}  // namespace ncw

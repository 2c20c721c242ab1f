// What ties one communicator to NCCL's profiler events (the shim is also NCCL's profiler plugin:
// profiler_plugin.cpp). The issuing thread writes one "expectation" per collective before the call: NCCL's own
// sequence number for it (comm->seqNumber[func], counted per collective kind from 0, which is what the Coll event
// descriptor carries) and where our record is. NCCL's Coll start (inside the call, on the same thread, or later on
// its host-callback thread) claims it; the KernelCh events (NCCL's proxy thread: one per channel, with GPU globaltimer
// stamps) then give the op's GPU start (first channel start) and end (last channel stop).
//
// Who completes an op is decided once per op, race-free, through its expectation's state: an op issued while the
// communicator's kernel events are known to flow is "offered" to the profiler (no CUDA events); after the call the
// wrapper takes it back (and uses CUDA events) unless NCCL's Coll start took it first.
//
// Everything here is written on the hot path or in NCCL's callbacks: atomics only, no locks, no allocation.
#pragma once

#include <atomic>
#include <cstdint>

#include "ncclwatch/format.h"

namespace ncw {

struct CommRuntime;

struct ProfExpect {
    enum : uint32_t { kObserve = 0, kOffered = 1, kTaken = 2, kWithdrawn = 3 };
    std::atomic<uint64_t> tag{0};  // (op kind << 56) | (NCCL seq + 1); 0 = empty
    std::atomic<uint32_t> state{kObserve};
    uint64_t ticket = 0;
    uint64_t coll_seq = 0;
    uint64_t count = 0;
    uint64_t t_issue_ns = 0;
};

// One Coll event in flight (its handle is this object; a KernelCh event's handle is this object's address | 1).
struct ProfilerLink;
struct alignas(64) ProfOp {
    ProfilerLink* link = nullptr;
    std::atomic<uint32_t> busy{0};      // 1 from the Coll start until the op ended (all channels stopped)
    std::atomic<uint32_t> finished{0};  // the op's end was written (once: by NCCL's proxy thread or our publisher)
    bool owned = false;                 // its completion is ours to write (else: observed only)
    uint32_t nchannels = 1;
    uint64_t ticket = 0;
    uint64_t coll_seq = 0;
    uint64_t t_issue_ns = 0;
    std::atomic<uint32_t> started{0};
    std::atomic<uint32_t> stopped{0};
    std::atomic<uint64_t> gpu_start{~0ull};    // GPU globaltimer (v4+) or our clock (v3), earliest channel start
    std::atomic<uint64_t> gpu_stop{0};         // latest channel stop
    std::atomic<uint64_t> t_last_event_ns{0};  // our clock at its last channel event
};

struct ProfilerLink {
    static constexpr uint32_t kExpect = 1024;  // power of two: expectations in flight (issued, start not seen)
    static constexpr uint32_t kOps = 2048;     // power of two: Coll events in flight (run-ahead of the GPU)

    CommRuntime* cr = nullptr;
    uint64_t retired_at_pass = 0;  // finalized: the watchdog's pass count then (profiler_plugin.cpp reuse_link)
    int version = 0;               // the plugin interface NCCL chose (3..6)
    int rank = -1;
    int nranks = 0;
    uint64_t comm_hash = 0;

    // Set once the first KernelCh event of this communicator came: from then on its collectives are offered.
    std::atomic<bool> kernel_events{false};
    std::atomic<uint64_t> withdrawn{0};      // offered ops the wrapper took back (no Coll start within the call)
    std::atomic<uint64_t> first_offered{0};  // the collective seq of the first op offered (0: none yet)
    std::atomic<bool> withdrawal_logged{false};

    ProfExpect expect[kExpect];

    // The callbacks' side, on lines of their own.
    alignas(64) std::atomic<uint64_t> next_op{0};
    std::atomic<uint64_t> dropped{0};  // Coll events we could not follow (no free ProfOp, no expectation)
    // Progress as the callbacks saw it, published into the comm slot by our threads (profiler_publish): the slot's
    // lines belong to the issuing thread, and NCCL's proxy thread writing them per op would pull them away.
    alignas(64) std::atomic<uint64_t> reached{0};
    std::atomic<uint64_t> completed{0};
    std::atomic<uint64_t> ops_done{0};
    std::atomic<uint64_t> t_progress_ns{0};
    // GPU globaltimer -> CLOCK_MONOTONIC: offset = mono - gpu. A channel start seen at mono time `now` bounds it from
    // above (now - start: the proxy saw it after it happened); the op's issue bounds it from below (the GPU cannot
    // start an op before its call). One conversion per communicator: the tightest bounds so far.
    std::atomic<int64_t> offset_hi{INT64_MAX};
    std::atomic<int64_t> offset_lo{INT64_MIN};
    // The publishers' (the watchdog's pass, a teardown, NCCL's finalize: one at a time wins each delta).
    alignas(64) std::atomic<uint64_t> published_ops{0};
    std::atomic<uint64_t> scan_from{0};  // the oldest ProfOp cursor position that may still be in flight

    ProfOp ops[kOps];

    static uint32_t expect_index(uint32_t kind, uint64_t nccl_seq) {
        return uint32_t((nccl_seq * 16 + kind) & (kExpect - 1));
    }
    static uint64_t tag_of(uint32_t kind, uint64_t nccl_seq) { return uint64_t(kind) << 56 | (nccl_seq + 1); }
};

// NCCL's seqNumber kinds are its collective functions; ours map onto them one to one (ncclBcast is Broadcast).
inline bool profiler_covers(disk::OpType op) { return disk::is_collective(op); }

// Hot path, before the call: the op's expectation, for NCCL's Coll start to find (`offer`: and to take).
template <class Desc>
inline ProfExpect* profiler_expect(ProfilerLink& pl, const OpRef& ref, const Desc& d, uint64_t nccl_seq,
                                   uint64_t t_issue, bool offer) {
    const uint32_t kind = uint32_t(d.op);
    ProfExpect& e = pl.expect[ProfilerLink::expect_index(kind, nccl_seq)];
    e.tag.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.state.store(offer ? ProfExpect::kOffered : ProfExpect::kObserve, std::memory_order_relaxed);
    e.ticket = ref.ticket;
    e.coll_seq = ref.coll_seq;
    e.count = d.count;
    e.t_issue_ns = t_issue;
    e.tag.store(ProfilerLink::tag_of(kind, nccl_seq), std::memory_order_release);
    if (offer && !pl.first_offered.load(std::memory_order_relaxed))
        pl.first_offered.store(ref.coll_seq, std::memory_order_relaxed);
    return offer ? &e : nullptr;
}

// After the call: true when the op is ours again (NCCL's Coll start did not take it), false when the profiler
// completes it.
inline bool profiler_withdraw(ProfilerLink& pl, ProfExpect& e) {
    uint32_t st = ProfExpect::kOffered;
    if (!e.state.compare_exchange_strong(st, ProfExpect::kWithdrawn, std::memory_order_acq_rel)) return false;
    pl.withdrawn.fetch_add(1, std::memory_order_relaxed);
    return true;
}

}  // namespace ncw

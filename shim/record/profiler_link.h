// What ties one communicator to NCCL's profiler events (the shim is also NCCL's profiler plugin:
// shim/complete/profiler_plugin.cpp). The issuing thread writes one "expectation" per collective before the call:
// where our record is, and the op's sequence number. NCCL's Coll start claims it; the KernelCh events (NCCL's proxy
// thread: one per channel the op was cut over, with GPU globaltimer stamps) then give the op's GPU start (its first
// channel's start) and, where that stamp means it, its end.
//
// How a Coll is tied to its op. v5+ (NCCL 2.28): by identity. NCCL starts a CollApi event inside the API call, on the
// caller's thread, and hands the handle we return for it back as that op's Coll parent, wherever and whenever the
// Coll starts (at launch, at the outermost ncclGroupEnd, on CUDA's host-callback thread, on an NCCL thread for a
// nonblocking communicator, at each replay of a captured graph). Our handle names the op (its index among the
// communicator's ops), so no arithmetic on NCCL's own numbering (which skips captured, zero-count and one-rank
// collectives, renumbers a group's ops by size and counts AllGather and Broadcast in bytes) is needed. Sends and
// receives the same way: a P2pApi event inside ncclSend / ncclRecv, whose handle comes back as the P2p's parent
// (NCCL gives a P2p no sequence number of its own). v3/v4: collectives by NCCL's per-kind sequence number
// (comm->seqNumber[func]) and the count, which is right for eager single collectives only; their sends and receives
// keep CUDA events, and make the communicator's counts lower bounds (`p2p_unfollowed`).
//
// When an op is complete on the GPU (every rule exact):
// - RING, and a send or receive: its last KernelCh stop (thread 0 of a ring block moves with the whole block; a p2p
//   channel's work ends with its transfer). Other algorithms (TREE, NVLS, CollNet, PAT) stamp the stop when thread
//   0's role is done, which for a tree leaf is a few microseconds after its start whatever its peers do: those stops
//   prove nothing.
// - any algorithm: a later kernel of the same communicator started (NCCL serialises a communicator's kernels), which
//   the Group event of each launch ("plan", v5+) orders;
// - the last op before a pause: the completion tracker's catch-up event on its stream (the op follows the stream's
//   claim, StreamClaim), once the stream is quiet.
//
// Who completes an op is decided once per op, race-free, through its expectation's state: an op issued while the
// communicator's kernel events are known to flow is "offered" to the profiler (no CUDA events of its own); after the
// call the wrapper takes it back (and uses CUDA events) unless NCCL took it (v5: its CollApi came within the call;
// v3/v4: its Coll start did).
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
    // v5+: the op's index on its communicator; v3/v4: (op kind << 56) | (NCCL seq + 1); 0 = empty.
    std::atomic<uint64_t> tag{0};
    std::atomic<uint32_t> state{kObserve};
    std::atomic<uint32_t> api{0};  // v5+: NCCL's CollApi event named it (NCCL has the op; its Coll will come)
    bool captured = false;         // v5+: issued into a CUDA graph capture (its Colls are replays)
    uint64_t ticket = 0;
    uint64_t coll_seq = 0;  // 0: a send or receive
    uint64_t count = 0;
    uint64_t t_issue_ns = 0;
};

// One Coll event in flight (its handle is this object; a KernelCh event's handle is this object's address | 1).
struct ProfilerLink;
struct alignas(64) ProfOp {
    ProfilerLink* link = nullptr;
    std::atomic<uint32_t> busy{0};  // 1 from the Coll start until it is free again: finished and every channel stopped
    std::atomic<uint32_t> finished{0};  // the op's end was written (once: by whichever rule proved it first)
    std::atomic<uint32_t> votes{0};     // to free it: its end written, and its last channel's stop seen (2 votes)
    bool owned = false;                 // its completion is ours to write (else: observed only)
    bool ring = false;                  // its last KernelCh stop is the op's end (RING, and every send or receive)
    bool p2p = false;                   // a send or receive: its end is its record's, never a collective count
    uint32_t nchannels = 1;             // KernelCh events NCCL will send for it; 0: unknown (CollNet says 0)
    uint64_t plan = 0;                  // v5+: the kernel launch it is part of (its Group event), in launch order
    uint64_t ticket = 0;
    uint64_t coll_seq = 0;
    uint64_t op_index = 0;  // v5+: the op's index on its communicator (0: v3/v4)
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

    // Set once the first KernelCh event of this communicator came: from then on its collectives are offered. Its
    // sends and receives once one of theirs came (a transport may give them none: they then keep CUDA events).
    std::atomic<bool> kernel_events{false};
    std::atomic<bool> p2p_kernel_events{false};
    std::atomic<uint64_t> withdrawn{0};      // offered ops the wrapper took back (v3/v4: no Coll start within the call)
    std::atomic<uint64_t> first_offered{0};  // the collective seq of the first collective offered (0: none yet)
    // Sends and receives: one was offered (v5+); one took CUDA events before any was offered (`p2p_early`: lower
    // bounds until one is offered; a later one completing proves the earlier ones of its peer and direction); one
    // took CUDA events after that or while the collectives' events flowed (v3/v4, a nonblocking or captured one, one
    // NCCL's P2pApi did not name): lower bounds from then on.
    std::atomic<bool> p2p_offered{false};
    std::atomic<bool> p2p_early{false};
    std::atomic<bool> p2p_unfollowed{false};
    std::atomic<bool> p2p_logged{false};
    std::atomic<bool> withdrawal_logged{false};
    std::atomic<bool> desynced{false};  // a KernelCh stamp older than its op: these events prove nothing from then on
    std::atomic<bool> replayed{false};  // ...or a CUDA graph replayed captured ops here (graph_hooks.cpp), which does
    std::atomic<bool> desync_logged{false};

    ProfExpect expect[kExpect];

    // The callbacks' side, on lines of their own.
    alignas(64) std::atomic<uint64_t> next_op{0};
    std::atomic<uint64_t> dropped{0};        // Coll events we could not follow (no free ProfOp, no expectation)
    std::atomic<uint64_t> dropped_owned{0};  // of them, ones of an offered op: its GPU start is then not known
    std::atomic<uint64_t> plans{0};          // v5+: Group events (kernel launches) so far; a plan's number is its order
    std::atomic<uint64_t> started_plan{0};   // the newest plan a KernelCh start was seen of
    // Progress as the callbacks saw it, published into the comm slot by our threads (profiler_publish): the slot's
    // lines belong to the issuing thread, and NCCL's proxy thread writing them per op would pull them away.
    alignas(64) std::atomic<uint64_t> reached{0};
    std::atomic<uint64_t> completed{0};
    // v5+: the newest op completed (any kind): its op index << 24 | its group's id (the low 24 bits; 0: none)
    std::atomic<uint64_t> completed_op{0};
    std::atomic<uint64_t> taken_op{0};  // v5+: the highest op index whose Coll or P2p came (NCCL launched it)
    // v5+: ops NCCL's CollApi or P2pApi named whose Coll or P2p never came (NCCL gives none for some kernels: its
    // symmetric ones), each completed alone once proven (complete_unseen); `unseen_open`: of them, ones a later op's
    // launch shows unseen and nothing has proven complete yet (the watchdog's count at its last publish).
    std::atomic<uint64_t> unseen{0};
    std::atomic<uint64_t> unseen_open{0};
    std::atomic<bool> unseen_logged{false};
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
    // v5+: an expectation lives at its op's index on the communicator (from 1), and that index is its tag.
    static uint32_t expect_index(uint64_t op_index) { return uint32_t(op_index & (kExpect - 1)); }
    bool by_identity() const { return version >= 5; }
};

// The handles we give NCCL, told apart by their two low bits (a ProfOp is 64-byte aligned): a Coll's or P2p's is its
// ProfOp (00), a KernelCh's the ProfOp | 1, a CollApi's or P2pApi's names our op (its index on the communicator << 2 |
// 2), a Group's (one kernel launch) names its plan (plan << 2 | 3). NCCL never looks inside them.
enum : uintptr_t { kHandleChannel = 1, kHandleApi = 2, kHandlePlan = 3, kHandleTagMask = 3 };
inline void* api_handle(uint64_t op_index) { return reinterpret_cast<void*>(uintptr_t(op_index << 2) | kHandleApi); }
inline void* plan_handle(uint64_t plan) { return reinterpret_cast<void*>(uintptr_t(plan << 2) | kHandlePlan); }

// The collectives NCCL launches as a Coll (its five functions; ncclBcast is its Broadcast). AlltoAll, Gather and
// Scatter become Send/Recv tasks inside NCCL: they keep the CUDA-event path. Sends and receives are followed by
// identity only (v5+; shim/intercept/op_hook.h).
inline bool profiler_covers(disk::OpType op) {
    return op == disk::OpType::AllReduce || op == disk::OpType::Broadcast || op == disk::OpType::Reduce ||
           op == disk::OpType::AllGather || op == disk::OpType::ReduceScatter;
}

// Hot path, before the call: the op's expectation, for NCCL's Coll start to find (`offer`: and to take). Returned
// whether offered or not: the CollApi event of the call marks it (ThreadState::api_expect).
template <class Desc>
inline ProfExpect* profiler_expect(ProfilerLink& pl, const OpRef& ref, const Desc& d, uint64_t nccl_seq,
                                   uint64_t t_issue, bool offer) {
    const uint32_t kind = uint32_t(d.op);
    const bool by_id = pl.by_identity();
    ProfExpect& e =
        pl.expect[by_id ? ProfilerLink::expect_index(ref.op_index) : ProfilerLink::expect_index(kind, nccl_seq)];
    e.tag.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.state.store(offer ? ProfExpect::kOffered : ProfExpect::kObserve, std::memory_order_relaxed);
    e.api.store(0, std::memory_order_relaxed);
    e.captured = false;
    e.ticket = ref.ticket;
    e.coll_seq = ref.coll_seq;
    e.count = d.count;
    e.t_issue_ns = t_issue;
    e.tag.store(by_id ? ref.op_index : ProfilerLink::tag_of(kind, nccl_seq), std::memory_order_release);
    if (offer && ref.coll_seq && !pl.first_offered.load(std::memory_order_relaxed))
        pl.first_offered.store(ref.coll_seq, std::memory_order_relaxed);
    if (offer && !ref.coll_seq && !pl.p2p_offered.load(std::memory_order_relaxed))
        pl.p2p_offered.store(true, std::memory_order_relaxed);
    return &e;
}

// A send or receive whose GPU progress comes from CUDA events although this communicator's kernel events flow:
// from then on its counts are lower bounds. A plain store, once (one issuing thread per communicator).
inline void profiler_p2p_unfollowed(ProfilerLink& pl) {
    if (!pl.p2p_unfollowed.load(std::memory_order_relaxed)) pl.p2p_unfollowed.store(true, std::memory_order_relaxed);
}
inline void profiler_p2p_early(ProfilerLink& pl) {
    if (!pl.p2p_early.load(std::memory_order_relaxed)) pl.p2p_early.store(true, std::memory_order_relaxed);
}

// The op is ours whatever NCCL says of it (it failed, or there is no room to follow it): a later Coll observes it only.
inline void profiler_disown(ProfExpect& e) {
    uint32_t st = ProfExpect::kOffered;
    e.state.compare_exchange_strong(st, ProfExpect::kWithdrawn, std::memory_order_acq_rel);
}

// After the call: true when the op is ours again, false when the profiler completes it. v5+: NCCL has it once its
// CollApi event named it, whenever its Coll comes; v3/v4: once its Coll start took it.
inline bool profiler_withdraw(ProfilerLink& pl, ProfExpect& e) {
    if (pl.by_identity() && e.api.load(std::memory_order_acquire)) return false;
    uint32_t st = ProfExpect::kOffered;
    if (!e.state.compare_exchange_strong(st, ProfExpect::kWithdrawn, std::memory_order_acq_rel)) return false;
    if (!pl.by_identity()) pl.withdrawn.fetch_add(1, std::memory_order_relaxed);
    if (!e.coll_seq) profiler_p2p_unfollowed(pl);
    return true;
}

}  // namespace ncw

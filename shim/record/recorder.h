// The hot path's writes into the rank file: one ring record per operation, the communicator's progress block and
// its window of recent signatures. Lock-free (atomics only), no allocation, no syscalls.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "ncclwatch/format.h"
#include "read/text.h"
#include "shim/record/comm_registry.h"
#include "shim/record/rank_file_writer.h"

namespace ncw {

// An operation as the wrapper saw it (from the api_table's OpDesc initializer).
struct OpDesc {
    disk::OpType op;
    const void* sendbuf;
    const void* recvbuf;
    size_t count;
    int dtype;
    int redop;  // -1 if none
    int root_or_peer;
    ncclComm_t comm;
    cudaStream_t stream;
};

// A counter with one writer at a time: a load and a release store, no locked instruction. Sequence numbers and the
// issue-side counts of a communicator have one: NCCL lets one thread at a time use a communicator.
template <class T>
inline T bump(std::atomic<T>& a, T by = 1) {
    const T v = a.load(std::memory_order_relaxed) + by;
    a.store(v, std::memory_order_release);
    return v;
}
template <class T>
inline void raise_to(std::atomic<T>& a, T v) {  // atomic_max's single-writer form
    if (a.load(std::memory_order_relaxed) < v) a.store(v, std::memory_order_release);
}

template <class T>
inline void atomic_max(std::atomic<T>& a, T v) {
    T cur = a.load(std::memory_order_relaxed);
    while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_release, std::memory_order_relaxed)) {
    }
}
template <class T>
inline void atomic_min(std::atomic<T>& a, T v) {
    T cur = a.load(std::memory_order_relaxed);
    while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_release, std::memory_order_relaxed)) {
    }
}

using BacktraceFn = int (*)(void** frames, int depth);

struct IssueOptions {
    uint32_t tid = 0;  // the caller's, cached per thread (gettid is a syscall)
    uint32_t group_id = 0;
    uint8_t flags = 0;
    uint8_t origin = 0;               // disk::RecordOrigin
    BacktraceFn backtrace = nullptr;  // non-null with NCCLWATCH_BACKTRACE=1
};

// Claims a ticket, writes the record and advances the issued counters. Returns what later updates need.
OpRef record_issue(const RankFileWriter& f, CommRuntime& cr, const OpDesc& d, const IssueOptions& opt, uint64_t now);

// The record of `ref`, unless the ring has wrapped over it since (nullptr).
disk::OpRecord* live_record(const RankFileWriter& f, const OpRef& ref);

// The call returned (result known).
void record_return(const RankFileWriter& f, const OpRef& ref, ncclResult_t result, uint64_t now);
// The call returned an error (not success, not in progress): counted failed, never completed (format 1.5); the
// first failure's seq, result and time are kept. Atomics only: no lock, no syscall.
void record_failed(const RankFileWriter& f, const OpRef& ref, int32_t result, uint64_t now);
// ncclCommGetAsyncError reported an error (a peer gone, a remote abort) for ops whose calls returned success: the
// communicator's first failure, once (nothing if a call failed before), at the oldest collective not known completed
// (0: none outstanding). Called on the framework's polling thread: atomics only, no lock, no syscall, no allocation.
// true when this call recorded it.
bool record_async_failed(CommRuntime& cr, int32_t result, uint64_t now);
// Whether the communicator is broken: an asynchronous error, a call failed with a CUDA, system, internal or remote
// error (not a call refused for its arguments), or an abort. GPU completions seen after that are not counted: the
// abort ends the kernels it cancels, and their events would count ops the peers never joined. Relaxed loads only
// (NCCL's threads call it).
inline bool comm_broken(const disk::CommSlot& s) {
    return text::nccl_result_breaks_comm(s.async_error.load(std::memory_order_relaxed)) ||
           (s.ops_failed.load(std::memory_order_relaxed) &&
            text::nccl_result_breaks_comm(s.first_failed_result.load(std::memory_order_relaxed))) ||
           s.state.load(std::memory_order_relaxed) == uint32_t(disk::CommState::Aborted);
}
// The GPU completed the operation (or, without GPU tracking, the call returned). (The poller's completions, and its
// "reached", go through CompletionBatch below.)
// progress=false: counted as done (nothing left to wait for, e.g. no event could be had) without proving that the
// GPU moved, so the stall clock is not reset.
void record_done(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool progress = true);
// record_done where the calling thread is its communicator's only completer (Runtime::completes_on_return: no GPU
// tracking at all, so no poller and no profiler thread writes its progress block): plain stores.
void record_done_on_return(const RankFileWriter& f, const OpRef& ref, uint64_t now);
// record_return and record_done_on_return in one: the call returned ncclSuccess, and that completes the op.
void record_returned_done(const RankFileWriter& f, const OpRef& ref, uint64_t now);
// A record's completion time, and its "reached" time if it has none: a completed op was necessarily reached. One
// completer per op; "reached" may race with the poller's own, and either time is right.
inline void stamp_done(disk::OpRecord& rec, uint64_t now) {
    rec.t_done_ns.store(now, std::memory_order_relaxed);
    if (rec.t_reached_ns.load(std::memory_order_relaxed) == 0) rec.t_reached_ns.store(now, std::memory_order_relaxed);
}

// Completions found by the completion poller, applied to each communicator's progress block once per poll: the
// block's cache lines are written by the issuing thread on every call, and one write per poll instead of one per op
// keeps the poller from pulling them away from it (measured: about 100 ns per call at high op rates).
class CompletionBatch {
public:
    void done(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool progress = true);
    // raise = false: only the record's "reached" time (a mark's op: see StreamClaim).
    void reached(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool raise = true);
    // `count` ops without records to update (followers, see StreamClaim), the highest collective seq among them.
    void followers_done(disk::CommSlot* slot, uint64_t count, uint64_t seq, bool progress = true);
    // A host synchronisation proved every collective up to `seq` complete (shim/complete/sync_apply.h).
    void proven(disk::CommSlot* slot, uint64_t seq);
    void flush(uint64_t now);

private:
    struct PerComm {
        disk::CommSlot* slot = nullptr;
        uint64_t reached = 0;
        uint64_t completed = 0;
        uint64_t count = 0;
        bool progress = false;
    };
    PerComm& of(disk::CommSlot* slot);
    std::vector<PerComm> comms_;
};

// Sets flags on a record after the fact (e.g. kFlagUntracked when no event could be had).
void record_add_flags(const RankFileWriter& f, const OpRef& ref, uint8_t flags);

// Lifecycle events (init, split, destroy, abort, async error): a record with no sequence number.
void record_event(const RankFileWriter& f, const CommRuntime* cr, uint64_t comm_id, disk::OpType op, int32_t result,
                  int32_t arg, uint64_t now);

}  // namespace ncw

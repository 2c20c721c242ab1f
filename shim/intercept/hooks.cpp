#include "shim/intercept/hooks.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "ncclwatch/hash.h"
#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/complete/profiler_plugin.h"
#include "shim/intercept/comm_lifecycle.h"
#include "shim/intercept/op_hook.h"
#include "shim/record/comm_identity.h"
#include "shim/record/profiler_link.h"
#include "shim/record/runtime.h"
#include "shim/start/startup.h"
#include "shim/watch/py_stacks.h"

namespace ncw {

thread_local ThreadState tl_state __attribute__((tls_model("initial-exec")));

uint32_t CallScope::first_tid() {
    ts_.tid = uint32_t(syscall(SYS_gettid));
    py_note_nccl_thread(ts_.tid);  // once per thread: which Python thread issues NCCL calls (py_stacks.h)
    return ts_.tid;
}

namespace {

void init_bookkeeping_failed() { NCW_LOG_ONCE(error, "could not record a communicator init (out of memory?)"); }

// Our bookkeeping around an init: whatever it throws (out of memory) is logged and swallowed, and the real call
// runs exactly once either way.
template <typename Call>
ncclResult_t run_init(const CommInitInfo& info, ncclComm_t* out, Call&& call) {
    Runtime* rt = start_runtime();
    CommRuntime* cr = nullptr;
    if (rt) {
        try {
            cr = begin_comm(*rt, info);
        } catch (...) {
            init_bookkeeping_failed();
        }
    }
    ThreadState& ts = thread_state();
    ts.initializing = cr;  // NCCL's profiler init for it runs inside a blocking init, on this thread
    ncclResult_t r = call();
    ts.initializing = nullptr;
    if (!cr) return r;
    ErrnoKeeper keep;
    try {
        finish_comm(*rt, cr, out && (r == ncclSuccess || r == ncclInProgress) ? *out : nullptr, r);
    } catch (...) {
        init_bookkeeping_failed();
    }
    return r;
}

// Returns the communicator's runtime when it was unregistered, for release_slot.
CommRuntime* end_comm(ncclComm_t comm, disk::OpType event, disk::CommState state, ncclResult_t r, bool unregister) {
    Runtime* rt = runtime();
    if (!rt) return nullptr;
    CommRuntime* cr = rt->comms.find(comm);
    if (!cr) return nullptr;
    record_event(rt->file, cr, cr->comm_id, event, r, cr->rank, now_mono_ns());
    if (cr->slot) cr->slot.load()->state.store(uint32_t(state), std::memory_order_release);
    if (unregister) {
        cr->destroyed.store(true, std::memory_order_release);
        rt->comms.remove(comm);
        // What its pending events proved goes with it: the poller no longer looks (ProgressProofs::apply), and
        // after the teardown nothing of it is pending on the GPU.
        if (disk::CommSlot* slot = cr->slot.load()) {
            slot->coll_unreached.store(0, std::memory_order_relaxed);
            slot->coll_uncompleted.store(0, std::memory_order_relaxed);
        }
        return cr;
    }
    return nullptr;
}

// A call on a communicator we watch that neither makes nor ends it (format 1.14: a suspend, a resume, a one-sided
// call): one record, its result and ARG.
void note_comm_call(ncclComm_t comm, disk::OpType event, ncclResult_t r, int32_t arg) {
    Runtime* rt = runtime();
    CommRuntime* cr = rt ? rt->comms.find(comm) : nullptr;
    if (cr) record_event(rt->file, cr, cr->comm_id, event, r, arg, now_mono_ns());
}

// After the final state and the settle: the file's slot may go to a later communicator (comm_slots.h), and, once the
// communicator is gone for good (retire), its runtime too (comm_pool.h).
void release_slot(CommRuntime* cr, bool retire = false) {
    Runtime* rt = runtime();
    if (!rt || !cr) return;
    try {
        rt->slots.release(*cr);
        if (retire) rt->comm_pool.retire(*cr, rt->slots);
    } catch (...) {
        NCW_LOG_ONCE(warn, "could not release a destroyed communicator's comm slot (out of memory?)");
    }
}

// A communicator's last followers at its teardown: see CompletionTracker::Settle. Not after ncclCommAbort, whose ops
// never completed.
CompletionTracker::Settle settle_begin(ncclComm_t comm) {
    Runtime* rt = runtime();
    CommRuntime* cr = rt && rt->tracker ? rt->comms.find(comm) : nullptr;
    if (!cr) return {};
    try {
        return rt->tracker->settle_begin(*cr);
    } catch (...) {
        NCW_LOG_ONCE(warn, "could not settle a communicator's last ops at its teardown");
    }
    return {};
}

void settle_end(CompletionTracker::Settle& settle, ncclComm_t comm) {
    Runtime* rt = runtime();
    if (!rt) return;
    // The teardown call returned once NCCL completed the communicator's work: what its profiler events proved goes
    // into the progress block now, before the process (often) exits.
    if (CommRuntime* cr = rt->comms.find(comm)) profiler_publish_one(*cr);
    if (!rt->tracker) return;
    try {
        rt->tracker->settle_end(settle);  // its completion batch may allocate
    } catch (...) {
        NCW_LOG_ONCE(warn, "could not settle a communicator's last ops at its teardown");
    }
}

}  // namespace

namespace hook {

ncclResult_t ncclGetUniqueId(CallScope& s, ncclUniqueId* uniqueId) {
    errno = s.saved_errno();
    return NCW_CALL_REAL(ncclGetUniqueId, uniqueId);
}

ncclResult_t ncclCommInitRank(CallScope& s, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    CommInitInfo info;
    info.comm_id = root_comm_id(commId);
    info.rank = rank;
    info.nranks = nranks;
    return run_init(info, comm, [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommInitRank, comm, nranks, commId, rank);
    });
}

ncclResult_t ncclCommInitRankConfig(CallScope& s, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
    CommInitInfo info;
    info.comm_id = root_comm_id(commId);
    info.rank = rank;
    info.nranks = nranks;
    info.config = config;
    return run_init(info, comm, [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommInitRankConfig, comm, nranks, commId, rank, config);
    });
}

ncclResult_t ncclCommInitRankScalable(CallScope& s, ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
    CommInitInfo info;
    info.comm_id = nId > 0 && commIds ? root_comm_id(commIds[0]) : 0;
    info.rank = myrank;
    info.nranks = nranks;
    info.config = config;
    return run_init(info, newcomm, [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommInitRankScalable, newcomm, nranks, myrank, nId, commIds, config);
    });
}

ncclResult_t ncclCommInitAll(CallScope& s, ncclComm_t* comm, int ndev, const int* devlist) {
    Runtime* rt = start_runtime();
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommInitAll, comm, ndev, devlist);
    if (!rt || r != ncclSuccess || !comm) return r;
    ErrnoKeeper keep;
    // All ranks live in this process, so a process-local identity is one every rank agrees on.
    uint64_t parts[3] = {rt->initall_counter.fetch_add(1), uint64_t(getpid()), rt->file.hdr->boot_id_hash};
    uint64_t id = fnv1a64(parts, sizeof(parts));
    try {
        for (int i = 0; i < ndev; ++i) {
            CommInitInfo info;
            info.comm_id = id;
            info.rank = i;
            info.nranks = ndev;
            finish_comm(*rt, begin_comm(*rt, info), comm[i], r);
        }
    } catch (...) {
        init_bookkeeping_failed();
    }
    return r;
}

ncclResult_t ncclCommSplit(CallScope& s, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
    Runtime* rt = runtime();
    CommRuntime* parent = rt ? rt->comms.find(comm) : nullptr;
    if (!parent) {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommSplit, comm, color, key, newcomm, config);
    }
    // Every member calls split on the parent in the same order, so the counter agrees across ranks.
    uint64_t counter = parent->split_counter.fetch_add(1) + 1;
    CommInitInfo info;
    info.comm_id = child_comm_id(parent->comm_id, counter, color);
    info.parent_id = parent->comm_id;
    info.color = color;
    info.key = key;
    info.config = config;
    info.event = disk::OpType::CommSplit;
    auto call = [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommSplit, comm, color, key, newcomm, config);
    };
    if (color == NCCL_SPLIT_NOCOLOR) {
        ncclResult_t r = call();
        record_event(rt->file, parent, info.comm_id, disk::OpType::CommSplit, r, -1, now_mono_ns());
        return r;
    }
    return run_init(info, newcomm, call);
}

ncclResult_t ncclCommShrink(CallScope& s, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
    Runtime* rt = runtime();
    CommRuntime* parent = rt ? rt->comms.find(comm) : nullptr;
    auto call = [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommShrink, comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    };
    if (!parent) return call();
    uint64_t counter = parent->split_counter.fetch_add(1) + 1;
    CommInitInfo info;
    info.comm_id = shrink_comm_id(parent->comm_id, counter, excludeRanksList, excludeRanksCount);
    info.parent_id = parent->comm_id;
    info.config = config;
    info.event = disk::OpType::CommShrink;
    return run_init(info, newcomm, call);
}

// The teardown in progress (format 1.9, FileHeader::teardown_*): from before the real call until it returns, so that a
// teardown that hangs is seen. Only for communicators we watch; the comm id is taken before the call unregisters it.
class TeardownMark {
public:
    TeardownMark(ncclComm_t comm, disk::OpType op) noexcept {
        Runtime* rt = runtime();
        CommRuntime* cr = rt ? rt->comms.find(comm) : nullptr;
        if (!cr) return;
        hdr_ = rt->file.hdr;
        if (op == disk::OpType::CommAbort) mark_first_abort(cr->comm_id);
        hdr_->teardown_comm_id.store(cr->comm_id, std::memory_order_relaxed);
        hdr_->teardown_op.store(uint32_t(op), std::memory_order_relaxed);
        since_ = now_mono_ns();
        hdr_->teardown_since_ns.store(since_ ? since_ : 1, std::memory_order_release);
    }
    ~TeardownMark() {
        // Back to none, unless another thread's teardown began since (it clears its own).
        if (uint64_t mine = since_ ? since_ : 1; hdr_)
            hdr_->teardown_since_ns.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
    }
    TeardownMark(const TeardownMark&) = delete;
    TeardownMark& operator=(const TeardownMark&) = delete;

private:
    // The process's first abort (format 1.12): who called it (torch's watchdog, on a timeout or an error, or the
    // program's own teardown) tells how the job ended. The thread's name comes first; its time publishes it.
    void mark_first_abort(uint64_t comm_id) noexcept {
        if (hdr_->abort_mono_ns.load(std::memory_order_acquire)) return;
        static std::atomic<bool> taken{false};
        if (taken.exchange(true, std::memory_order_acq_rel)) return;
        char name[16] = {};
        prctl(PR_GET_NAME, name);
        std::memcpy(hdr_->abort_thread, name, sizeof name);
        hdr_->abort_comm_id = comm_id;
        const uint64_t now = now_mono_ns();
        hdr_->abort_mono_ns.store(now ? now : 1, std::memory_order_release);
    }

    disk::FileHeader* hdr_ = nullptr;
    uint64_t since_ = 0;
};

// The communicator whose orderly teardown runs on this thread (ThreadState::settling), for the real call's length.
class SettlingScope {
public:
    SettlingScope(ThreadState& ts, ncclComm_t comm) noexcept : ts_(ts) {
        Runtime* rt = runtime();
        ts_.settling = rt ? rt->comms.find(comm) : nullptr;
    }
    void end() noexcept { ts_.settling = nullptr; }
    ~SettlingScope() { end(); }
    SettlingScope(const SettlingScope&) = delete;
    SettlingScope& operator=(const SettlingScope&) = delete;

private:
    ThreadState& ts_;
};

ncclResult_t ncclCommFinalize(CallScope& s, ncclComm_t comm) {
    CompletionTracker::Settle settle;
    TeardownMark mark(comm, disk::OpType::CommFinalize);
    {
        ErrnoKeeper keep;
        settle = settle_begin(comm);
    }
    SettlingScope settling(s.ts(), comm);
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommFinalize, comm);
    settling.end();
    ErrnoKeeper keep;
    settle_end(settle, comm);
    end_comm(comm, disk::OpType::CommFinalize, disk::CommState::Finalized, r, false);
    return r;
}

ncclResult_t ncclCommDestroy(CallScope& s, ncclComm_t comm) {
    CompletionTracker::Settle settle;
    TeardownMark mark(comm, disk::OpType::CommDestroy);
    SettlingScope settling(s.ts(), comm);  // before end_comm unregisters it
    CommRuntime* gone = nullptr;
    {
        ErrnoKeeper keep;
        settle = settle_begin(comm);
        // Before the call: once it returns, NCCL may hand the same pointer to a new communicator.
        gone = end_comm(comm, disk::OpType::CommDestroy, disk::CommState::Destroyed, ncclSuccess, true);
    }
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommDestroy, comm);
    settling.end();
    ErrnoKeeper keep;
    settle_end(settle, comm);
    // NCCL has let go of it (its profiler context finalized inside the call) and allows no call on it from now on.
    release_slot(gone, true);
    return r;
}

ncclResult_t ncclCommAbort(CallScope& s, ncclComm_t comm) {
    TeardownMark mark(comm, disk::OpType::CommAbort);
    {
        ErrnoKeeper keep;
        // What NCCL's profiler events proved before the abort (the slot is released with it).
        if (Runtime* rt = runtime(); CommRuntime* cr = rt ? rt->comms.find(comm) : nullptr) profiler_publish_one(*cr);
        // Not retired: an abort ends calls still inside NCCL on other threads, whose wrappers then write to the
        // runtime, so it is never reused (comm_pool.h).
        release_slot(end_comm(comm, disk::OpType::CommAbort, disk::CommState::Aborted, ncclSuccess, true));
    }
    errno = s.saved_errno();
    return NCW_CALL_REAL(ncclCommAbort, comm);
}

ncclResult_t ncclCommRevoke(CallScope& s, ncclComm_t comm, int revokeFlags) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommRevoke, comm, revokeFlags);
    ErrnoKeeper keep;
    end_comm(comm, disk::OpType::CommRevoke, disk::CommState::Revoked, r, false);
    return r;
}

ncclResult_t ncclCommGetAsyncError(CallScope& s, ncclComm_t comm, ncclResult_t* asyncError) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommGetAsyncError, comm, asyncError);
    Runtime* rt = runtime();
    if (!rt || r != ncclSuccess || !asyncError) return r;
    ErrnoKeeper keep;
    CommRuntime* cr = rt->comms.find(comm);
    if (!cr) return r;
    ncclResult_t e = *asyncError;
    if (e == ncclSuccess && cr->identity_pending.load(std::memory_order_acquire)) refresh_comm_identity(*rt, *cr);
    if (e == ncclSuccess) {
        // A nonblocking communicator has now enqueued what it had in progress: its events can go on the stream.
        DeferredOp op;
        uint64_t now = now_mono_ns();
        while (cr->deferred.try_pop(op)) complete_deferred(*rt, *cr, op, now);
    }
    if (cr->slot && e != ncclInProgress) {
        int32_t prev = cr->slot.load()->async_error.exchange(int32_t(e), std::memory_order_relaxed);
        if (prev != int32_t(e) && e != ncclSuccess) {
            const uint64_t now = now_mono_ns();
            record_async_failed(*cr, int32_t(e), now);  // its calls returned success: the error is their failure
            record_event(rt->file, cr, cr->comm_id, disk::OpType::AsyncError, e, cr->rank, now);
        }
    }
    return r;
}

// NCCL 2.29: a communicator grown by new ranks. The existing ranks number their grows of a communicator alike (as
// their splits); a new rank knows only the unique id its root passed it, and is watched under that id. (The existing
// ranks and the new ones are then two communicators to the analysis: NCCL gives every rank no id in common.)
ncclResult_t ncclCommGrow(CallScope& s, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config) {
    Runtime* rt = runtime();
    CommRuntime* parent = comm && rt ? rt->comms.find(comm) : nullptr;
    auto call = [&] {
        errno = s.saved_errno();
        return NCW_CALL_REAL(ncclCommGrow, comm, nRanks, uniqueId, rank, newcomm, config);
    };
    CommInitInfo info;
    info.nranks = nRanks;
    info.rank = rank >= 0 ? rank : -1;
    info.config = config;
    info.event = disk::OpType::CommGrow;
    if (parent) {
        info.comm_id = shrink_comm_id(parent->comm_id, parent->split_counter.fetch_add(1) + 1, nullptr, 0);
        info.parent_id = parent->comm_id;
    } else if (!comm && uniqueId) {
        info.comm_id = root_comm_id(*uniqueId);
    } else {
        return call();  // a communicator we do not watch
    }
    return run_init(info, newcomm, call);
}

ncclResult_t ncclCommSuspend(CallScope& s, ncclComm_t comm, int flags) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommSuspend, comm, flags);
    ErrnoKeeper keep;
    note_comm_call(comm, disk::OpType::CommSuspend, r, flags);
    return r;
}

ncclResult_t ncclCommResume(CallScope& s, ncclComm_t comm) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclCommResume, comm);
    ErrnoKeeper keep;
    note_comm_call(comm, disk::OpType::CommResume, r, -1);
    return r;
}

// One-sided calls: stream-ordered as any op, but no peer posts an op to pair with them, so they take no sequence
// number; each is one record (its peer, its result), which says what the stream was given.
ncclResult_t ncclPutSignal(CallScope& s, const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                           ncclComm_t comm, cudaStream_t stream) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclPutSignal, localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx,
                                   flags, comm, stream);
    ErrnoKeeper keep;
    s.tid();  // cached for the record: no syscall on a frequent call
    note_comm_call(comm, disk::OpType::PutSignal, r, peer);
    return r;
}

ncclResult_t ncclSignal(CallScope& s, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream) {
    errno = s.saved_errno();
    ncclResult_t r = NCW_CALL_REAL(ncclSignal, peer, sigIdx, ctx, flags, comm, stream);
    ErrnoKeeper keep;
    s.tid();
    note_comm_call(comm, disk::OpType::Signal, r, peer);
    return r;
}

ncclResult_t ncclWaitSignal(CallScope& s, int nDesc, ncw_wait_signal_desc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream) {
    errno = s.saved_errno();
    // Read before the call: the descriptors are the caller's, valid for the call's length.
    const int peer = nDesc == 1 && signalDescs ? signalDescs[0].peer : -1;
    ncclResult_t r = NCW_CALL_REAL(ncclWaitSignal, nDesc, signalDescs, comm, stream);
    ErrnoKeeper keep;
    s.tid();
    note_comm_call(comm, disk::OpType::WaitSignal, r, peer);
    return r;
}

}  // namespace hook
}  // namespace ncw

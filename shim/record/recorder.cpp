#include "shim/record/recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "shim/record/call_scope.h"
#include "shim/record/profiler_link.h"
#include "shim/record/ring_publish.h"

namespace ncw {
namespace {

// Handles from ncclRedOpCreatePreMulSum are mangled per communicator and differ across ranks: all of them are
// recorded as one value (ncclNumOps, shown as "premulsum") so that ranks compare equal.
int32_t normalized_redop(int32_t op) { return op >= int32_t(ncclNumOps) ? int32_t(ncclNumOps) : op; }

void write_signature(disk::CommSlot* slot, uint64_t seq, const OpDesc& d, uint64_t now, uint32_t tid, uint8_t flags,
                     uint8_t origin) {
    disk::OpSignature& s = slot->recent[seq % disk::kRecentSigs];
    s.seq.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.count = d.count;
    s.t_issue_ns = now;
    s.op = uint8_t(d.op);
    s.dtype = uint8_t(d.dtype);
    s.flags = flags;
    s.origin = origin;
    s.redop = normalized_redop(d.redop);
    s.root = disk::is_rooted(d.op) ? d.root_or_peer : -1;
    s.tid = tid;
    s.stream = reinterpret_cast<uint64_t>(d.stream);
    s.seq.store(seq, std::memory_order_release);
}

}  // namespace

disk::OpRecord* live_record(const RankFileWriter& f, const OpRef& ref) {
    disk::OpRecord* rec = &f.ring[ref.ticket & f.ring_mask];
    return rec->stamp.load(std::memory_order_acquire) == 2 * ref.ticket + 2 ? rec : nullptr;
}

OpRef record_issue(const RankFileWriter& f, CommRuntime& cr, const OpDesc& d, const IssueOptions& opt, uint64_t now) {
    OpRef ref;
    ref.cr = &cr;
    disk::CommSlot* s = cr.slot;
    // An operation issued into an idle communicator starts the stall clock now, not at the last completion; stored
    // before the count moves (the fetch_add releases it), so that the watchdog never reads an op outstanding against
    // the old clock: a thread preempted between the two read as a stall of the whole idle time (seen under load: a
    // new communicator's first op, "no completion for 60367 s").
    if (s && s->ops_completed.load(std::memory_order_relaxed) >= s->ops_issued.load(std::memory_order_relaxed))
        s->t_last_progress_ns.store(now, std::memory_order_relaxed);
    // The counters that hand out sequence numbers live in the progress block itself, so "last issued" needs no
    // second store: the allocation is the publication. One writer at a time (bump): NCCL's rule for a communicator.
    ref.op_index = bump(s ? s->ops_issued : cr.op_index);
    uint64_t seq;
    if (disk::is_p2p(d.op)) {
        uint32_t peer = uint32_t(d.root_or_peer) % (cr.peer_slots ? cr.peer_slots : 1);
        auto* counters = d.op == disk::OpType::Send ? cr.send_seq : cr.recv_seq;
        seq = counters ? bump(counters[peer]) : 0;
    } else {
        seq = ref.coll_seq = bump(s ? s->coll_issued : cr.coll_seq);
    }
    const uint32_t tid = opt.tid;
    uint8_t flags = opt.flags | (cr.nonblocking ? disk::kFlagNonBlocking : 0);
    // The record goes straight into a slot of this thread's chunk of the ring (ring_publish.h): plain stores between
    // the stamp's two.
    ref.ticket = take_ticket(f, thread_state().ring);
    uint64_t* frames = opt.backtrace ? record_frames(f, ref.ticket) : nullptr;
    if (frames) flags |= disk::kFlagHasBacktrace;
    disk::OpRecord& rec = open_record(f, ref.ticket);
    rec.comm_id = cr.comm_id;
    rec.seq = seq;
    rec.op_index = ref.op_index;
    rec.count = d.count;
    rec.sendbuf = reinterpret_cast<uint64_t>(d.sendbuf);
    rec.recvbuf = reinterpret_cast<uint64_t>(d.recvbuf);
    rec.stream = reinterpret_cast<uint64_t>(d.stream);
    rec.t_issue_ns = now;
    rec.t_return_ns.store(0, std::memory_order_relaxed);
    rec.t_reached_ns.store(0, std::memory_order_relaxed);
    rec.t_done_ns.store(0, std::memory_order_relaxed);
    rec.tid = tid;
    rec.group_id = opt.group_id;
    rec.op = uint8_t(d.op);
    rec.dtype = uint8_t(d.dtype);
    rec.flags = flags;
    rec.origin = opt.origin;
    rec.peer_or_root = d.root_or_peer;
    rec.redop = normalized_redop(d.redop);
    rec.result.store(-1, std::memory_order_relaxed);
    rec.comm_slot = cr.slot_index;
    rec.comm_nranks = cr.nranks > 0 && cr.nranks <= 0xffff ? uint16_t(cr.nranks) : 0;
    rec.comm_rank = cr.rank;
    if (frames) {
        const uint32_t depth = std::min(f.bt_depth, disk::kMaxBacktraceDepth);
        const int n = opt.backtrace(reinterpret_cast<void**>(frames), int(depth));
        for (uint32_t i = n < 0 ? 0 : uint32_t(n); i < depth; ++i) frames[i] = 0;
    }
    close_record(rec, ref.ticket);
    // The ring is larger than the caches: the next record's two lines are asked for now, so that its stores do not
    // wait for them.
    const RingCursor& cur = thread_state().ring;
    if (cur.next != cur.end) {
        const auto* next = reinterpret_cast<const char*>(&f.ring[cur.next & f.ring_mask]);
        __builtin_prefetch(next, 1);
        __builtin_prefetch(next + 64, 1);
    }

    if (s) {
        if (ref.coll_seq)
            write_signature(s, ref.coll_seq, d, now, tid, flags, opt.origin);
        else
            bump(d.op == disk::OpType::Send ? s->p2p_sends : s->p2p_recvs);
        s->t_last_issue_ns.store(now, std::memory_order_relaxed);
    }
    return ref;
}

void record_return(const RankFileWriter& f, const OpRef& ref, ncclResult_t result, uint64_t now) {
    if (disk::OpRecord* rec = live_record(f, ref)) {
        rec->t_return_ns.store(now, std::memory_order_relaxed);
        rec->result.store(int32_t(result), std::memory_order_relaxed);
    }
    disk::CommSlot* s = ref.cr->slot;
    if (ref.coll_seq && s) raise_to(s->coll_returned, ref.coll_seq);  // only the issuing thread writes it
}

void record_failed(const RankFileWriter&, const OpRef& ref, int32_t result, uint64_t now) {
    disk::CommSlot* s = ref.cr->slot;
    if (!s) return;
    // The first failure claims the time, then writes its seq and result before ops_failed is raised (release).
    uint64_t none = 0;
    if (s->t_first_failed_ns.compare_exchange_strong(none, now ? now : 1, std::memory_order_relaxed)) {
        s->first_failed_seq.store(ref.coll_seq, std::memory_order_relaxed);
        s->first_failed_result.store(result, std::memory_order_relaxed);
    }
    s->ops_failed.fetch_add(1, std::memory_order_release);
}

bool record_async_failed(CommRuntime& cr, int32_t result, uint64_t now) {
    disk::CommSlot* s = cr.slot;
    if (!s) return false;
    uint64_t none = 0;
    if (!s->t_first_failed_ns.compare_exchange_strong(none, now ? now : 1, std::memory_order_relaxed)) return false;
    const uint64_t issued = s->coll_issued.load(std::memory_order_relaxed);
    // NCCL's profiler events prove completions before the watchdog publishes them into the slot.
    const ProfilerLink* pl = cr.prof.load(std::memory_order_acquire);
    const uint64_t completed = std::max(s->coll_completed.load(std::memory_order_relaxed),
                                        pl ? pl->completed.load(std::memory_order_relaxed) : 0);
    s->first_failed_seq.store(issued > completed ? completed + 1 : 0, std::memory_order_relaxed);
    s->first_failed_result.store(result, std::memory_order_relaxed);
    // One failure for the communicator: its outstanding op will not complete (a stall it ends did not recover).
    cr.failed_ops.fetch_add(1, std::memory_order_relaxed);
    s->ops_failed.fetch_add(1, std::memory_order_release);
    return true;
}

void record_done(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool progress) {
    if (disk::OpRecord* rec = live_record(f, ref)) stamp_done(*rec, now);
    if (disk::CommSlot* s = ref.cr->slot) {
        if (ref.coll_seq) {
            atomic_max(s->coll_reached, ref.coll_seq);
            atomic_max(s->coll_completed, ref.coll_seq);
        }
        // A count, not a maximum: an op completed out of order (another stream, a fallback) must not hide an
        // earlier one that is stuck.
        s->ops_completed.fetch_add(1, std::memory_order_acq_rel);
        if (progress) s->t_last_progress_ns.store(now, std::memory_order_relaxed);
    }
}

namespace {

// The progress block's side of a completion whose only completer is the issuing thread: plain stores.
void slot_done_on_return(disk::CommSlot* s, uint64_t coll_seq, uint64_t now) {
    if (!s) return;
    if (coll_seq) {
        raise_to(s->coll_reached, coll_seq);
        raise_to(s->coll_completed, coll_seq);
    }
    s->t_last_progress_ns.store(now, std::memory_order_relaxed);
    bump(s->ops_completed);  // after the time: a reader that sees the count sees when it moved
}

}  // namespace

void record_done_on_return(const RankFileWriter& f, const OpRef& ref, uint64_t now) {
    if (disk::OpRecord* rec = live_record(f, ref)) stamp_done(*rec, now);
    slot_done_on_return(ref.cr->slot, ref.coll_seq, now);
}

void record_returned_done(const RankFileWriter& f, const OpRef& ref, uint64_t now) {
    if (disk::OpRecord* rec = live_record(f, ref)) {
        rec->t_return_ns.store(now, std::memory_order_relaxed);
        rec->result.store(int32_t(ncclSuccess), std::memory_order_relaxed);
        rec->t_reached_ns.store(now, std::memory_order_relaxed);
        rec->t_done_ns.store(now, std::memory_order_relaxed);
    }
    disk::CommSlot* s = ref.cr->slot;
    if (s && ref.coll_seq) raise_to(s->coll_returned, ref.coll_seq);
    slot_done_on_return(s, ref.coll_seq, now);
}

CompletionBatch::PerComm& CompletionBatch::of(disk::CommSlot* slot) {
    for (auto& c : comms_)
        if (c.slot == slot) return c;
    comms_.push_back(PerComm{slot});
    return comms_.back();
}

void CompletionBatch::done(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool progress) {
    if (disk::OpRecord* rec = live_record(f, ref)) stamp_done(*rec, now);
    followers_done(ref.cr->slot, 1, ref.coll_seq, progress);
}

void CompletionBatch::reached(const RankFileWriter& f, const OpRef& ref, uint64_t now, bool raise) {
    if (disk::OpRecord* rec = live_record(f, ref)) rec->t_reached_ns.store(now, std::memory_order_relaxed);
    disk::CommSlot* s = ref.cr->slot;
    if (!s || !raise) return;
    PerComm& c = of(s);
    c.reached = std::max(c.reached, ref.coll_seq);
}

void CompletionBatch::followers_done(disk::CommSlot* slot, uint64_t count, uint64_t seq, bool progress) {
    if (!slot || !count) return;
    PerComm& c = of(slot);
    c.completed = std::max(c.completed, seq);
    c.reached = std::max(c.reached, seq);
    c.count += count;
    c.progress |= progress;
}

void CompletionBatch::proven(disk::CommSlot* slot, uint64_t seq) {
    if (!slot || !seq) return;
    PerComm& c = of(slot);
    c.completed = std::max(c.completed, seq);
    c.reached = std::max(c.reached, seq);
    c.progress = true;
}

void CompletionBatch::flush(uint64_t now) {
    for (const auto& c : comms_) {
        if (comm_broken(*c.slot)) continue;  // an abort's completions prove nothing (comm_broken)
        if (c.reached) atomic_max(c.slot->coll_reached, c.reached);
        if (c.completed) atomic_max(c.slot->coll_completed, c.completed);
        if (c.count) c.slot->ops_completed.fetch_add(c.count, std::memory_order_acq_rel);
        if (c.progress) c.slot->t_last_progress_ns.store(now, std::memory_order_relaxed);
    }
    comms_.clear();
}

void record_add_flags(const RankFileWriter& f, const OpRef& ref, uint8_t flags) {
    if (disk::OpRecord* rec = live_record(f, ref)) {
        // A plain byte: only the issuing thread sets flags, before any reader needs them to be exact.
        rec->flags = rec->flags | flags;
    }
    disk::CommSlot* s = ref.cr->slot;
    if ((flags & disk::kFlagUntracked) && s) s->untracked_ops.fetch_add(1, std::memory_order_relaxed);
    if ((flags & disk::kFlagSampledOut) && ref.coll_seq && s) {
        // The verdict reads it from the signature window: "reached" is unknown for such an op.
        disk::OpSignature& sig = s->recent[ref.coll_seq % disk::kRecentSigs];
        if (sig.seq.load(std::memory_order_relaxed) == ref.coll_seq) sig.flags = sig.flags | flags;
    }
}

void record_event(const RankFileWriter& f, const CommRuntime* cr, uint64_t comm_id, disk::OpType op, int32_t result,
                  int32_t arg, uint64_t now) {
    const uint64_t ticket = take_ticket(f, thread_state().ring);
    disk::OpRecord& rec = open_record(f, ticket);
    // Zero but for these (the stamp, first, is already set).
    std::memset(reinterpret_cast<unsigned char*>(&rec) + sizeof rec.stamp, 0, sizeof rec - sizeof rec.stamp);
    rec.comm_id = comm_id;
    rec.t_issue_ns = now;
    rec.t_return_ns.store(now, std::memory_order_relaxed);
    // The thread's cached id where a call of it cached one (one-sided calls may be frequent); else the syscall, rare.
    const uint32_t tid = thread_state().tid;
    rec.tid = tid ? tid : uint32_t(syscall(SYS_gettid));
    rec.op = uint8_t(op);
    rec.peer_or_root = arg;
    rec.redop = -1;
    rec.result.store(result, std::memory_order_relaxed);
    rec.comm_slot = cr ? cr->slot_index : 0xffff;
    rec.comm_nranks = cr && cr->nranks > 0 && cr->nranks <= 0xffff ? uint16_t(cr->nranks) : 0;
    rec.comm_rank = cr ? cr->rank : -1;
    close_record(rec, ticket);
}

}  // namespace ncw

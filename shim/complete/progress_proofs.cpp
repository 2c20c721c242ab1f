#include "shim/complete/progress_proofs.h"

#include <nccl.h>

namespace ncw {
namespace {

void lower_to(uint64_t& v, uint64_t seq) {
    if (seq && (!v || seq < v)) v = seq;
}

// The op's call returned and may have enqueued it. A record the ring overwrote says nothing, so proves nothing.
bool enqueued(const RankFileWriter& f, const OpRef& ref) {
    const disk::OpRecord& r = f.ring[ref.ticket & f.ring_mask];
    const uint64_t stamp = 2 * ref.ticket + 2;
    if (r.stamp.load(std::memory_order_acquire) != stamp) return false;
    const int32_t result = r.result.load(std::memory_order_acquire);
    if (r.stamp.load(std::memory_order_acquire) != stamp) return false;
    return result == int32_t(ncclSuccess) || result == int32_t(ncclInProgress);
}

}  // namespace

void ProgressProofs::clear() {
    for (uint16_t i : touched_) by_slot_[i] = PerComm{};
    touched_.clear();
}

ProgressProofs::PerComm* ProgressProofs::of(const CommRuntime* cr) {
    // A destroyed communicator's slot may already be a later one's: its pending events prove nothing about that.
    if (!cr || cr->slot_index >= by_slot_.size() || cr->destroyed.load(std::memory_order_acquire)) return nullptr;
    PerComm& p = by_slot_[cr->slot_index];
    if (p.cr == cr) return &p;
    if (p.cr) return nullptr;
    p.cr = cr;
    touched_.push_back(cr->slot_index);
    return &p;
}

void ProgressProofs::not_reached(const RankFileWriter& f, const OpRef* refs, int n) {
    PerComm* p = n > 0 ? of(refs[0].cr) : nullptr;
    if (!p) return;
    for (int i = 0; i < n; ++i) {
        if (!refs[i].coll_seq || (p->unreached && refs[i].coll_seq >= p->unreached) || !enqueued(f, refs[i])) continue;
        lower_to(p->unreached, refs[i].coll_seq);
        lower_to(p->uncompleted, refs[i].coll_seq);
    }
}

void ProgressProofs::not_completed(const OpRef& ref) {
    if (PerComm* p = of(ref.cr)) lower_to(p->uncompleted, ref.coll_seq);
}

void ProgressProofs::apply(CommRuntime& cr) const {
    disk::CommSlot* s = cr.slot.load(std::memory_order_acquire);
    // A torn-down communicator's proofs were cleared at its teardown (hooks.cpp end_comm), for good.
    if (!s || cr.slot_index >= by_slot_.size() || cr.destroyed.load(std::memory_order_acquire)) return;
    const PerComm& p = by_slot_[cr.slot_index];
    const bool mine = p.cr == &cr;
    // Read first: the block's lines are the issuing thread's, and most passes change nothing.
    const uint64_t unreached = mine ? p.unreached : 0;
    const uint64_t uncompleted = mine ? p.uncompleted : 0;
    if (s->coll_unreached.load(std::memory_order_relaxed) != unreached)
        s->coll_unreached.store(unreached, std::memory_order_relaxed);
    if (s->coll_uncompleted.load(std::memory_order_relaxed) != uncompleted)
        s->coll_uncompleted.store(uncompleted, std::memory_order_relaxed);
}

}  // namespace ncw

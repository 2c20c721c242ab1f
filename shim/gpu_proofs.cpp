// What pending CUDA events prove (see gpu_proofs.h).
#include "gpu_proofs.h"

#include <algorithm>

#include "ncclwatch/format.h"

namespace ncw {

void GpuProofs::add(const RankFileWriter& file, const OpRef* refs, int n, bool done) {
    if (n <= 0) return;
    const CommRuntime* cr = refs[0].cr;
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < n; ++k) {
        const OpRef& ref = refs[k];
        if (ref.cr != cr) return;
        if (!ref.coll_seq) continue;
        lo = lo ? std::min(lo, ref.coll_seq) : ref.coll_seq;
        hi = std::max(hi, ref.coll_seq);
        if (done) {
            const disk::OpRecord& r = file.ring[ref.ticket & file.ring_mask];
            if (r.stamp.load(std::memory_order_acquire) != 2 * ref.ticket + 2 || (r.flags & disk::kFlagDeferred))
                return;
        }
    }
    if (!hi) return;
    auto it = std::find_if(proofs_.begin(), proofs_.end(), [&](const Proof& p) { return p.cr == cr; });
    if (it == proofs_.end()) it = proofs_.insert(proofs_.end(), Proof{cr, 0, 0});
    // A group's "reached" event comes before all of its ops; its completion event after the last of them.
    uint64_t& v = done ? it->uncompleted : it->unreached;
    const uint64_t seq = done ? hi : lo;
    v = v ? std::min(v, seq) : seq;
}

void GpuProofs::publish(CommRuntime& cr) const {
    disk::CommSlot* slot = cr.slot.load(std::memory_order_acquire);
    if (!slot) return;
    uint64_t unreached = 0, uncompleted = 0;
    for (const auto& p : proofs_)
        if (p.cr == &cr) unreached = p.unreached, uncompleted = p.uncompleted;
    if (slot->coll_unreached.load(std::memory_order_relaxed) != unreached)
        slot->coll_unreached.store(unreached, std::memory_order_relaxed);
    if (slot->coll_uncompleted.load(std::memory_order_relaxed) != uncompleted)
        slot->coll_uncompleted.store(uncompleted, std::memory_order_relaxed);
}

}  // namespace ncw

// The host synchronisations' proofs applied (see sync_apply.h).
#include "shim/complete/sync_apply.h"

#include <algorithm>

#include "shim/complete/profiler_plugin.h"

namespace ncw {

void SyncApply::note_record(const disk::OpRecord& r) {
    SyncProofs* sp = sync_proofs();
    const auto op = disk::OpType(r.op);
    if (sp && r.stream && (disk::is_collective(op) || disk::is_p2p(op)) && !sp->is_nccl_stream(uintptr_t(r.stream)))
        sp->note_nccl_stream(uintptr_t(r.stream));
}

std::vector<SyncApply::Proven> SyncApply::resolve(const RankFileWriter& f, const SyncCut& cut, size_t max_records) {
    std::vector<Proven> out;
    const uint64_t head = f.hdr->write_ticket.load(std::memory_order_acquire);
    const uint64_t capacity = uint64_t(f.ring_mask) + 1;
    const uint64_t floor = cut.t_ns > kLookBackNs ? cut.t_ns - kLookBackNs : 0;
    size_t seen = 0;
    for (uint64_t t = head; t-- > 0 && head - t <= capacity && seen < max_records; ++seen) {
        const disk::OpRecord& r = f.ring[t & f.ring_mask];
        const uint64_t stamp = r.stamp.load(std::memory_order_acquire);
        if (stamp != 2 * t + 2) continue;  // not written (yet), or overwritten
        const auto op = disk::OpType(r.op);
        if (!disk::is_collective(op) && !disk::is_p2p(op)) continue;
        if (r.t_issue_ns < floor) break;
        if (r.tid != cut.tid || (cut.stream != kAnyStream && r.stream != cut.stream) || r.t_issue_ns >= cut.t_ns)
            continue;
        // Enqueued before the cut: its call returned with success, outside a graph capture, not deferred (a
        // nonblocking communicator enqueues it later).
        if (r.flags & (disk::kFlagCaptured | disk::kFlagDeferred) || r.result.load(std::memory_order_acquire) != 0)
            continue;
        auto it = std::find_if(out.begin(), out.end(), [&](const Proven& p) { return p.comm_id == r.comm_id; });
        if (it == out.end()) {
            out.push_back(Proven{r.comm_id, r.comm_slot, 0, 0});
            it = out.end() - 1;
        }
        it->op_index = std::max(it->op_index, r.op_index);
        if (disk::is_collective(op)) it->coll_seq = std::max(it->coll_seq, r.seq);
    }
    return out;
}

void SyncApply::pass(const RankFileWriter& f, const CommRegistry& comms, CompletionBatch& batch, uint64_t now) {
    SyncProofs* sp = sync_proofs();
    if (!sp) return;
    // This pass's cuts, the newest per (stream, thread); one already applied is not looked up again.
    std::vector<SyncCut> cuts;
    SyncCutSet set;
    for (int popped = 0; popped < 4096 && sp->pop(set); ++popped)
        for (int i = 0; i < set.n; ++i) {
            const SyncCut& c = set.cut[i];
            auto same = [&](const SyncCut& x) { return x.stream == c.stream && x.tid == c.tid; };
            auto done = std::find_if(applied_.begin(), applied_.end(), same);
            if (done != applied_.end() && done->t_ns >= c.t_ns) continue;
            auto it = std::find_if(cuts.begin(), cuts.end(), same);
            if (it == cuts.end())
                cuts.push_back(c);
            else
                it->t_ns = std::max(it->t_ns, c.t_ns);
        }
    for (const SyncCut& c : cuts) {
        for (const Proven& p : resolve(f, c, 8192)) {
            CommRuntime* cr = nullptr;
            comms.for_each([&](CommRuntime& x) {
                if (!cr && x.comm_id == p.comm_id && !x.destroyed.load(std::memory_order_acquire)) cr = &x;
            });
            disk::CommSlot* slot = cr ? cr->slot.load(std::memory_order_acquire) : nullptr;
            if (!cr || (slot && comm_broken(*slot))) continue;
            profiler_proven(*cr, p.coll_seq, p.op_index, now);
            for (auto& claim : cr->claims)
                if (claim.key.load(std::memory_order_acquire))
                    claim.covered_op = std::max(claim.covered_op, p.op_index);
            if (slot && p.coll_seq > slot->coll_completed.load(std::memory_order_acquire))
                batch.proven(slot, p.coll_seq);
        }
        auto done = std::find_if(applied_.begin(), applied_.end(),
                                 [&](const SyncCut& x) { return x.stream == c.stream && x.tid == c.tid; });
        if (done == applied_.end())
            applied_.push_back(c);
        else
            done->t_ns = c.t_ns;
        if (applied_.size() > 256) applied_.erase(applied_.begin());  // threads and streams come and go
    }
}

}  // namespace ncw

// The live digest client's view of its own process (self_reader.h). Runs on the client's thread only: it reads our
// memory with the readers' torn-read-safe copies and never takes a lock a training thread could hold.
#include "shim/live/self_reader.h"

#include <algorithm>

#include "read/gpu_spans.h"
#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "shim/record/rank_file_writer.h"

namespace ncw::live_client {

SelfReader::SelfReader(const RankFileWriter& w, const SlotTable* slots, PassCounter* pass)
    : slots_(slots), pass_(pass) {
    if (w.file_backed && !file_.open(w.path)) error_ = file_.error();
    // The anonymous-memory fallback (or a file that cannot be read back): the same reader over our own mapping.
    if (!file_.is_open()) file_.open_memory(w.hdr, w.size, "(this process's memory)");
}

HeaderInfo SelfReader::header() const { return file_.header(); }

std::vector<CommInfo> SelfReader::comms() const {
    std::vector<CommInfo> c = file_.comms();
    if (slots_) {
        // Communicators without a file slot, from their init on: their progress block is one of our own (never
        // freed, as the CommRuntime), written by the hot path under the same seqlocks as a file slot. Read inside a
        // pass: a destroyed one's runtime is not reused for another communicator meanwhile (comm_pool.h).
        std::vector<const disk::CommSlot*> own;
        PassScope pass(pass_);
        slots_->for_each_unslotted([&](const CommRuntime& cr) {
            if (!cr.destroyed.load(std::memory_order_acquire))
                if (const disk::CommSlot* s = cr.slot.load(std::memory_order_acquire)) own.push_back(s);
        });
        std::vector<CommInfo> more = read_memory_slots(own);
        pass.leave();
        std::sort(more.begin(), more.end(), [](const CommInfo& a, const CommInfo& b) { return a.comm_id < b.comm_id; });
        for (CommInfo& m : more)
            if (m.comm_id) c.push_back(std::move(m));
    }
    read_gpu_spans(file_, c, kLiveSpanRecords);  // for the collector's straggler rule (profiler-timed comms only)
    return c;
}

void SelfReader::p2p(FileSnapshot& s) const { read_p2p(file_, s); }

}  // namespace ncw::live_client

// What the host's synchronisations proved (shim/record/sync_proofs.h), applied by the completion poller once a pass:
// each proof's cuts are matched with the ring's records (the ops of the cut's thread on the cut's stream, issued before
// its time), and per communicator the newest of them, with every op before it, is complete: NCCL's profiler's ops
// (profiler_proven, those it never gave an event for included), and the followers of the CUDA-event path (their
// collective count, and their records' done times through StreamClaim::covered_op).
#pragma once

#include <cstdint>
#include <vector>

#include "shim/record/comm_registry.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"
#include "shim/record/sync_proofs.h"

namespace ncw {

class SyncApply {
public:
    // A record the poller's ring scan met: its stream carries NCCL ops (SyncProofs::note_nccl_stream).
    static void note_record(const disk::OpRecord& r);
    // The proofs queued since the last pass; `batch` is the pass's (flushed by the poller after).
    void pass(const RankFileWriter& f, const CommRegistry& comms, CompletionBatch& batch, uint64_t now);

    // What one cut proves on one communicator (exposed for the unit test).
    struct Proven {
        uint64_t comm_id = 0;
        uint16_t slot = 0xffff;
        uint64_t coll_seq = 0;
        uint64_t op_index = 0;
    };
    // The ops of the ring that `cut` covers, newest per communicator. Scans back from the head at most `max_records`
    // records, and no further than kLookBackNs before the cut.
    static std::vector<Proven> resolve(const RankFileWriter& f, const SyncCut& cut, size_t max_records);
    static constexpr uint64_t kLookBackNs = 60ull * 1000000000ull;

private:
    std::vector<SyncCut> applied_;  // per (stream, thread): the newest cut applied
};

}  // namespace ncw

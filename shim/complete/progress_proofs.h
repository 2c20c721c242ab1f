// What pending CUDA events prove about where the GPU is NOT (format 1.4's coll_unreached / coll_uncompleted on the
// event path): gathered by the completion poller over one pass and written to each progress block at its end. An
// event on a stream completes only once all work enqueued before it has, so while one is pending:
//   - one recorded just before op s (a "reached" event or a mark) proves s not reached, hence not completed;
//   - one recorded right after the call of op s returned proves s not completed (its last work is s).
// The values are as of the pass's queries: a reader may find the GPU moved on since, never a claim that was false.
#pragma once

#include <cstdint>
#include <vector>

#include "ncclwatch/format.h"
#include "shim/record/comm_registry.h"
#include "shim/record/rank_file_writer.h"

namespace ncw {

class ProgressProofs {
public:
    // A new pass: nothing proven yet.
    void clear();
    // A pending event recorded just before the ops refs[0..n). An op whose call failed enqueued nothing and is counted
    // completed on return, so only ops whose ring record says the call returned success (or "in progress") count.
    void not_reached(const RankFileWriter& f, const OpRef* refs, int n);
    // A pending event recorded right after the call of `ref` returned (successfully: it was recorded after that).
    void not_completed(const OpRef& ref);
    // Writes the communicator's proofs (0: none) into its progress block where they changed. Called before the
    // pass's completions are flushed (CompletionBatch), so that a reader who sees a count raised by this pass also
    // sees the proofs of this pass, not older ones the GPU has since left behind.
    void apply(CommRuntime& cr) const;

private:
    struct PerComm {
        const CommRuntime* cr = nullptr;
        uint64_t unreached = 0;
        uint64_t uncompleted = 0;
    };
    PerComm* of(const CommRuntime* cr);
    // By the file's slot index: a communicator without a slot has no progress block a reader sees.
    std::vector<PerComm> by_slot_ = std::vector<PerComm>(disk::kMaxComms);
    std::vector<uint16_t> touched_;
};

}  // namespace ncw

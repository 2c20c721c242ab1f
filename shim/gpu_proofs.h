// What the CUDA events still pending prove about a communicator's GPU progress (format 1.4: CommSlot::coll_unreached,
// coll_uncompleted). The counts the events give are lower bounds; a pending event is the proof of the other side:
// one recorded right before an op proves the op not reached (the work before it on the stream is still running), an
// op's own completion event, recorded on the issuing thread right after the call, proves the op not completed.
// The completion tracker's thread gathers them each pass and states them anew, so that one no event proves any more
// is withdrawn. Not the hot path.
#pragma once

#include <cstdint>
#include <vector>

#include "comm_registry.h"
#include "rank_file_writer.h"

namespace ncw {

class GpuProofs {
public:
    void clear() { proofs_.clear(); }
    // A pending event for refs[0..n): `done` = a completion event (else "reached"). A catch-up (n == 0), a deferred
    // completion event (recorded later: other work may sit before it), one whose records the ring overwrote (their
    // flags are gone) and one over several communicators prove nothing.
    void add(const RankFileWriter& file, const OpRef* refs, int n, bool done);
    // Writes the communicator's proofs into its comm slot (0: none proven).
    void publish(CommRuntime& cr) const;

private:
    struct Proof {
        const CommRuntime* cr;
        uint64_t unreached, uncompleted;  // lowest seq proven not reached / not completed; 0: none
    };
    std::vector<Proof> proofs_;
};

}  // namespace ncw

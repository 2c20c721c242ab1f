// Stragglers: not a hang, a rank that is consistently the last to arrive at the collectives of one communicator.
// From the arrival (issue) time per sequence number over the window of recent signatures, on a common clock.
#pragma once

#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

struct StragglerOptions {
    size_t min_common_seqs = 16;      // sequence numbers every visible rank recorded, at least
    double min_last_fraction = 0.75;  // last to arrive at this share of them, at least
    double min_lateness_s = 0.005;    // median lateness above this ...
    double step_gap_fraction = 0.10;  // ... and above this share of the median gap between consecutive seqs
};

// One STRAGGLER verdict per rank that arrived last at >= min_last_fraction of the common sequence numbers by a median
// lateness (its arrival minus the latest other rank's) above the threshold and above the stated clock uncertainty.
// Each rank's timestamps are moved by its RankCommState::clock_offset_ns first. Communicators with GPU completion
// tracking get none: there the CPU issue time runs ahead of the GPU and does not measure arrival.
std::vector<Verdict> find_stragglers(const CommView& view, const StragglerOptions& opt = {});

}  // namespace ncw::verdict

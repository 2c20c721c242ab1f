// Stragglers: not a hang, a rank that is consistently the last to arrive at the collectives of one communicator.
// Two ways, by what the ranks' files prove:
//   on GPUs (NCCL's profiler times every op: RankCommState::gpu_spans): at one sequence number the rank that arrives
//     last waits least inside the collective, so the rank whose in-collective GPU time is consistently the shortest
//     is the straggler, and the others' extra time is what it costs them. Durations only, each on its rank's own
//     clock: no clock is compared across hosts (straggler.cpp, "On GPUs");
//   without GPU tracking (a call returns once its op is done): from the arrival (issue) time per sequence number
//     over the window of recent signatures, on a common clock (straggler.cpp, "From arrival times").
#pragma once

#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

struct StragglerOptions {
    // Arrival times (no GPU tracking).
    size_t min_common_seqs = 16;      // sequence numbers every visible rank recorded, at least
    double min_last_fraction = 0.75;  // last to arrive at this share of them, at least
    double min_lateness_s = 0.005;    // median lateness above this ...
    double step_gap_fraction = 0.10;  // ... and above this share of the median gap between consecutive seqs

    // In-collective GPU times (NCCL's profiler); why these values: straggler.cpp, "On GPUs".
    size_t gpu_min_common_seqs = 16;          // sequence numbers every rank has a GPU time for, at least
    double gpu_min_shortest_fraction = 0.75;  // shortest inside the collective at this share of them, at least ...
    double gpu_max_chance = 1e-4;             // ... and that often with this probability at most, by chance alone
    double gpu_min_lateness_s = 0.002;        // median lateness at least this ...
    double gpu_step_fraction = 0.05;          // ... and at least this share of the step time
};

// The STRAGGLER verdicts of one communicator: the GPU way where its ranks have in-collective GPU times (every rank
// of the communicator visible), none where GPU tracking has no such times (the CPU issue time runs ahead of the GPU
// and does not measure arrival), the arrival-time way otherwise.
std::vector<Verdict> find_stragglers(const CommView& view, const StragglerOptions& opt = {});

// The GPU way alone: one verdict for the rank shortest inside the collective at >= gpu_min_shortest_fraction of the
// >= gpu_min_common_seqs sequence numbers that every rank has a GPU time for (and that often with a probability of
// at most gpu_max_chance by chance alone), whose median lateness (over those seqs, the other ranks' median
// in-collective time minus its own) is at least gpu_min_lateness_s and gpu_step_fraction of the step time (the
// median gap between consecutive seqs' GPU ends). It states the lateness and the share of the step time lost to it.
std::vector<Verdict> find_gpu_stragglers(const CommView& view, const StragglerOptions& opt = {});

}  // namespace ncw::verdict

// Stragglers: not a hang, a rank that is consistently the last to arrive at the collectives of one communicator.
// Two ways, by what the ranks' files prove:
//   on GPUs (NCCL's profiler times every op: RankCommState::gpu_spans): at one sequence number the rank that arrives
//     last waits least inside the collective, so the rank whose in-collective GPU time is consistently the shortest
//     is the straggler, and the others' extra time is what it costs them. Durations only, each on its rank's own
//     clock: no clock is compared across hosts (straggler.cpp, "On GPUs");
//   without GPU tracking (a call returns once its op is done): from the arrival (issue) time per sequence number
//     over the window of recent signatures, on a common clock (straggler.cpp, "From arrival times").
#pragma once

#include <map>
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
    // The newest windows of sequence numbers that every rank has a GPU time for: the same rank must be the straggler
    // in each (2 x 12; at 2 ranks, where which one is shortest is a coin flip per op, 3 x 16).
    size_t gpu_windows = 2;
    size_t gpu_window_seqs = 12;
    size_t gpu_windows_two_ranks = 3;
    size_t gpu_window_seqs_two_ranks = 16;
    double gpu_min_shortest_fraction = 0.75;  // shortest inside the collective at this share of each, at least ...
    double gpu_max_chance = 1e-4;             // ... and that often with this probability at most, by chance alone
    double gpu_min_lateness_s = 0.002;        // median lateness at least this ...
    double gpu_step_fraction = 0.05;          // ... and at least this share of the step time

    // Sends and receives timed by NCCL's profiler (find_p2p_stragglers): each median over this many receives at least,
    // and the next rank's lateness at most this share of the straggler's.
    uint64_t p2p_min_timed = 8;
    double p2p_max_next_fraction = 0.5;
    // ... and the straggler's lateness at least this share of the time its peers wait on it: two ranks that only
    // exchange with each other are each other's held and own, and one is always "later" by the noise (measured: 8 ms
    // of 126 in a hung send cycle; a slow stage, 18 to 19 ms of 37 to 50).
    double p2p_min_share = 0.25;
};

// What a process's GPU did, on every communicator it is in: its collectives' GPU spans, each a start and an end on
// its own clock, sorted by end; by rank file (RankCommState::file). The GPU rule takes the time a rank spent outside
// NCCL before an op from it: a rank that arrives last because its previous op in another communicator ended later
// (a tensor-parallel op after a data-parallel one) is not late by its own doing.
struct BusySpan {
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
};
using ProcessBusy = std::map<std::string, std::vector<BusySpan>>;
// The spans of the processes of `ranks` (every process where null) on every communicator of `views`.
ProcessBusy process_busy(const std::vector<const CommView*>& views, const std::vector<RankCommState>* ranks = nullptr);

// The STRAGGLER verdicts of one communicator: the GPU way where its ranks have in-collective GPU times (every rank
// of the communicator visible), none where GPU tracking has no such times (the CPU issue time runs ahead of the GPU
// and does not measure arrival), the arrival-time way otherwise.
// job: every communicator of the job (the view's own spans alone where null), read only where a rank is a candidate.
std::vector<Verdict> find_stragglers(const CommView& view, const StragglerOptions& opt = {},
                                     const std::vector<const CommView*>* job = nullptr);

// The GPU way alone: one verdict for the rank shortest inside the collective at >= gpu_min_shortest_fraction of the
// newest sequence numbers that every rank has a GPU time for (and that often with a probability of
// at most gpu_max_chance by chance alone), whose median lateness (over those seqs, the other ranks' median
// in-collective time minus its own) is at least gpu_min_lateness_s and gpu_step_fraction of the step time (the
// median gap between consecutive seqs' GPU ends). It states the lateness and the share of the step time lost to it.
// With `job` (every communicator of the job; without it, this one), the lateness it counts at each seq is no more
// than its own: its time outside NCCL before the op minus the other ranks' median (process_busy).
// The rank must be the one shortest inside in each of the newest gpu_windows windows (gpu_window_seqs each).
// A pipeline's slow stage, from the GPU times of sends and receives (PeerP2p::recvs_gpu_ns, NCCL's profiler): a
// receive's time is mostly its wait for the send, so the rank its peers wait longest for inside their receives from
// it, while it waits least inside its own (held: the median over its peers; own: its longest median from any one
// peer, since a stage waiting on the slow one passes that wait on), is the straggler: held - own at least
// gpu_min_lateness_s and p2p_min_share of held, and every other rank's at most p2p_max_next_fraction of it. Every rank
// of the communicator must be visible, with p2p_min_timed timed receives per peer.
std::vector<Verdict> find_p2p_stragglers(const CommView& view, const StragglerOptions& opt = {});

std::vector<Verdict> find_gpu_stragglers(const CommView& view, const StragglerOptions& opt = {},
                                         const std::vector<const CommView*>* job = nullptr);

}  // namespace ncw::verdict

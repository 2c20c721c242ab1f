// Where each rank is (verdict_ranks.cpp): its state in a communicator, what its counts prove about an op, whether
// it waits inside one or its GPU has not got to it. The facts every stall verdict stands on; the live report's table
// reads a rank's state from them too (report/report_text.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

const OpSig* find_sig(const RankCommState& r, uint64_t seq);
const RankCommState* state_of_rank(const CommView& v, int comm_rank);
std::vector<int> missing_ranks(const CommView& v);    // comm ranks 0..nranks-1 with no visible state
std::vector<size_t> by_comm_rank(const CommView& v);  // indices of v.ranks in comm-rank order
// What a rank's counts prove about collective `seq` (read/rank_state.h). Without GPU tracking, "completed" is the
// call's return, exact for what it means. With it, reached / completed are exact with progress_exact, or where the
// proofs close them (the next op proven not reached / not completed, or every issued op reached / completed);
// otherwise they are lower bounds, and "not reached" / "not completed" are proven only by unreached / uncompleted.
bool exact_counts(const RankCommState& r);
// The sends' and receives' counts per peer: no proof closes them (the collectives' order says nothing of them).
bool exact_p2p_counts(const RankCommState& r);
bool inside_call(const RankCommState& r, uint64_t seq);  // issued it, its call has not returned: inside NCCL for sure
bool proven_reached(const RankCommState& r, uint64_t seq);
bool proven_not_reached(const RankCommState& r, uint64_t seq);
bool proven_not_completed(const RankCommState& r, uint64_t seq);
// Proven inside `seq`: its call blocks in NCCL, or its GPU reached it and has proven not completed it.
bool proven_inside(const RankCommState& r, uint64_t seq);
bool gpu_behind(const RankCommState& r);  // its GPU has provably not reached the oldest incomplete collective
// Seconds waited inside the oldest incomplete collective; nothing if not waiting (dead, GPU behind, idle).
std::optional<double> wait_seconds(const RankCommState& r, uint64_t now_ns);
// Seconds without progress while the GPU is still busy before the oldest incomplete collective.
std::optional<double> busy_seconds(const RankCommState& r, uint64_t now_ns);

}  // namespace ncw::verdict

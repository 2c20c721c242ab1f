// What the verdict engine's parts share (verdict_*.cpp), not part of its interface (verdict.h): the words of the
// evidence, where each rank is, the matching key of a signature, and the parts that one question asks of another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/verdict.h"
#include "read/text.h"

namespace ncw::verdict::detail {

// ---- Words (verdict_text.cpp) ----

// ncclResult_t values (nccl.h, NCCL 2.28.9). Kept here so the verdict engine needs no NCCL header.
inline constexpr int32_t kNcclInProgress = 7;
using text::nccl_result_name;
// ncclInProgress is what ncclCommGetAsyncError reports for a nonblocking communicator with work in flight: normal.
inline bool is_async_error(int32_t r) { return r != 0 && r != kNcclInProgress; }
std::string hex_comm(uint64_t id);  // "0x00000000000000c0"
std::string secs(double s);         // "12.5 s"
inline double ns_to_s(uint64_t ns) { return double(ns) / 1e9; }
inline double age_s(uint64_t now_ns, uint64_t t_ns) { return t_ns && now_ns > t_ns ? ns_to_s(now_ns - t_ns) : 0.0; }
std::string ranks_word(const std::vector<int>& r);  // "rank 2" / "ranks 0,1,3"
std::string sig_body(const OpSig& s);               // "float32, 1048576 elements, sum, root 0"
// "AllReduce #42 (float32, 1048576 elements, sum)"; without the seq: "AllReduce (float32, ...)".
std::string sig_short(const OpSig& s, bool with_seq);
std::string rank_id(const RankCommState& r);  // "rank 0 (global 0, host h, pid 123)"
// One line of state per rank, shared by every stall verdict; W: the seq the stall is about.
std::string rank_state_line(const RankCommState& r, uint64_t now_ns, uint64_t W);
std::string last_op(const RankCommState& r);  // the op at the rank's latest issued seq, for "its last op"
// Where a rank's lower-bound counts come from: "CUDA events, sampled", "NCCL profiler, not every op seen"; "" when
// they are exact.
std::string bounds_basis(const RankCommState& r);

// ---- Where each rank is (verdict_ranks.cpp) ----

const OpSig* find_sig(const RankCommState& r, uint64_t seq);
const RankCommState* state_of_rank(const CommView& v, int comm_rank);
std::vector<int> missing_ranks(const CommView& v);    // comm ranks 0..nranks-1 with no visible state
std::vector<size_t> by_comm_rank(const CommView& v);  // indices of v.ranks in comm-rank order
// What a rank's counts prove about collective `seq` (read/rank_state.h). Without GPU tracking, "completed" is the
// call's return, exact for what it means. With it, reached / completed are exact only with progress_exact; otherwise
// they are lower bounds, and "not reached" / "not completed" are proven only by unreached / uncompleted.
bool exact_counts(const RankCommState& r);
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

// ---- What peers' completions prove (verdict_inferred.cpp) ----

// What peers' completions of all-joined collectives imply for a rank whose counts lag: its new "reached" (joined) and
// "completed" (never past an op of its own proven not completed).
struct Raise {
    size_t index;  // in view.ranks
    uint64_t reached;
    uint64_t completed;
};
// The raises, with one note each for the evidence; none in the common case.
std::vector<Raise> inferred_progress(const CommView& view, std::vector<std::string>& notes);

// ---- Matching signatures (verdict_mismatch.cpp) ----

// The fields that take part in matching. root only matters for rooted ops and redop only for reducing ops: NCCL
// ignores the other (PyTorch passes whatever it has), so a difference there is not a mismatch.
struct Key {
    uint8_t op;
    uint8_t dtype;
    uint64_t count;
    int32_t root;
    int32_t redop;
    auto operator<=>(const Key&) const = default;
};
Key key_of(const OpSig& s);
// The signature of `seq` as most of `ranks` recorded it (tie: lowest rank); falls back to any visible rank's copy.
OpSig majority_sig(const CommView& v, const std::vector<size_t>& order, const std::vector<int>& ranks, uint64_t seq);

// ---- Telling an extra op from a skipped one when the counts are symmetric, 1 vs 1 (verdict_tie.cpp) ----

enum class Lean { Unknown, ExtraOp, Skipped };
// `ahead` waits in W, `idle` completed W-1 and issued nothing more: which of the two diverged, with why in `ev`.
Lean tie_break(const RankCommState& ahead, const RankCommState& idle, uint64_t W, std::vector<std::string>& ev);

// ---- Drift (verdict_drift.cpp) ----

// The verdict of each drift of the view (find_drifts) while nothing waits: NOT_JOINED (skipped) or EXTRA_OP (added).
std::vector<Verdict> drift_verdicts(const CommView& view);

// ---- Point-to-point (verdict_p2p.cpp) ----

// Sends whose receive the peer never posted (and the reverse) among ranks otherwise at rest.
std::vector<Verdict> p2p_mismatches(const CommView& view);
// Only sends/receives are outstanding past the timeout: pair each pending one with what its peer posted.
std::vector<Verdict> diagnose_p2p_stall(const CommView& view, uint64_t now_ns, double timeout_s);

}  // namespace ncw::verdict::detail

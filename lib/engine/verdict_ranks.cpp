// Where each rank is: its state in a communicator, its wait, whether its GPU got to an op.
#include "engine/verdict_ranks.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

const OpSig* find_sig(const RankCommState& r, uint64_t seq) {
    if (seq == 0 || r.recent.empty()) return nullptr;
    // The reader's window is one signature per seq, in order: where it has no gap, seq is at its own offset.
    const uint64_t at = seq - r.recent.front().seq;
    if (seq >= r.recent.front().seq && at < r.recent.size() && r.recent[at].seq == seq) return &r.recent[at];
    for (const auto& s : r.recent)
        if (s.seq == seq) return &s;
    return nullptr;
}

// Not a scan: the report and the cascade pass look up every waiting rank, and a scan each is O(ranks^2) (minutes at
// 131,072 ranks). The view builder sorts the ranks by comm rank, each once (job_view.cpp): the rank is at its own
// index when none below it is missing, else a binary search finds it; a view built otherwise is scanned.
const RankCommState* state_of_rank(const CommView& v, int comm_rank) {
    const auto& rs = v.ranks;
    if (comm_rank >= 0 && size_t(comm_rank) < rs.size() && rs[size_t(comm_rank)].comm_rank == comm_rank &&
        (comm_rank == 0 || rs[size_t(comm_rank) - 1].comm_rank < comm_rank))
        return &rs[size_t(comm_rank)];
    const auto it = std::lower_bound(rs.begin(), rs.end(), comm_rank,
                                     [](const RankCommState& r, int cr) { return r.comm_rank < cr; });
    if (it != rs.end() && it->comm_rank == comm_rank && (it == rs.begin() || std::prev(it)->comm_rank < comm_rank))
        return &*it;
    for (const auto& r : rs)
        if (r.comm_rank == comm_rank) return &r;
    return nullptr;
}

// The comm ranks 0..nranks-1 for which no state is visible.
std::vector<int> missing_ranks(const CommView& v) {
    // Linear: a live collector calls this for communicators of 16,384 ranks several times a second.
    std::vector<bool> seen(size_t(std::max(v.nranks, 0)), false);
    for (const auto& s : v.ranks)
        if (s.comm_rank >= 0 && s.comm_rank < v.nranks) seen[size_t(s.comm_rank)] = true;
    std::vector<int> out;
    for (int r = 0; r < v.nranks; ++r)
        if (!seen[size_t(r)]) out.push_back(r);
    return out;
}

// Indices of view.ranks in comm-rank order, so every list and evidence line comes out sorted.
std::vector<size_t> by_comm_rank(const CommView& v) {
    std::vector<size_t> idx(v.ranks.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return v.ranks[a].comm_rank < v.ranks[b].comm_rank; });
    return idx;
}

namespace {

// When this rank's current wait began, or nothing if it is not inside a collective or the time is unknown.
// stall_since_ns (set by the shim's watchdog) wins. Otherwise the wait began when the previous op had completed AND
// the one after it had been issued: the later of the two. Taking the last progress alone would count the compute
// between two collectives as waiting and flag a rank that just entered its next op after a long forward pass.
std::optional<uint64_t> wait_start(const RankCommState& r) {
    if (r.issued <= r.completed) return std::nullopt;
    if (r.stall_since_ns) return r.stall_since_ns;
    uint64_t t_issue = 0;
    if (const OpSig* s = find_sig(r, r.completed + 1)) t_issue = s->t_issue_ns;
    // The last issue is the issue of completed+1 only when exactly one op is in flight; with more in flight it is
    // later, so it would understate the wait and is used only when nothing else is known.
    if (!t_issue && r.issued == r.completed + 1) t_issue = r.t_last_issue_ns;
    uint64_t t = std::max(r.t_last_progress_ns, t_issue);
    if (!t) t = r.t_last_issue_ns;
    if (!t) return std::nullopt;
    return t;
}

}  // namespace

bool exact_counts(const RankCommState& r) {
    if (!r.gpu_tracking || r.progress_exact) return true;
    // Lower bounds that the proofs close are exact: NCCL runs a communicator's ops in order, so when the op after
    // `completed` is proven not completed, no later one completed either; the same for `reached`. (A host
    // synchronisation proves ops complete, a pending event recorded after the next one proves it not complete: the
    // counts of a hung torch job, whose loss was read with .item() at the step before.)
    const bool completed_closed = r.completed >= r.issued || (r.uncompleted && r.uncompleted == r.completed + 1);
    const bool reached_closed = r.reached >= r.issued || (r.unreached && r.unreached == r.reached + 1);
    return completed_closed && reached_closed;
}

bool exact_p2p_counts(const RankCommState& r) { return !r.gpu_tracking || r.progress_exact; }

// The call's own record: issued, not returned. (Without GPU tracking "completed" is that return.)
bool inside_call(const RankCommState& r, uint64_t seq) {
    if (seq == 0 || r.issued < seq) return false;
    return r.gpu_tracking ? r.returned < seq : r.completed < seq;
}

// Without GPU tracking a rank "reached" an op once its call entered NCCL: the counts say nothing of its GPU.
bool proven_reached(const RankCommState& r, uint64_t seq) {
    if (!r.gpu_tracking) return r.issued >= seq;
    return r.reached >= seq || r.completed >= seq;
}

// A proof older than the counts (reached caught up with it since) proves nothing.
bool proven_not_reached(const RankCommState& r, uint64_t seq) {
    if (!r.gpu_tracking || r.reached >= seq || r.completed >= seq) return false;
    return r.progress_exact || (r.unreached != 0 && r.unreached <= seq && r.unreached > r.reached);
}

bool proven_not_completed(const RankCommState& r, uint64_t seq) {
    if (r.completed >= seq) return false;
    if (!r.gpu_tracking) return true;
    return r.progress_exact || (r.uncompleted != 0 && r.uncompleted <= seq && r.uncompleted > r.completed);
}

bool proven_inside(const RankCommState& r, uint64_t seq) {
    if (r.issued < seq) return false;
    return inside_call(r, seq) || (proven_reached(r, seq) && proven_not_completed(r, seq));
}

// The rank has issued collectives but its GPU has provably not reached the oldest incomplete one: it is busy with
// earlier work on its stream, not waiting inside NCCL.
bool gpu_behind(const RankCommState& r) { return r.issued > r.completed && proven_not_reached(r, r.completed + 1); }

// Seconds the rank has waited inside its oldest incomplete collective; nothing if it is not waiting. A dead rank
// is never "waiting" (it is a candidate culprit instead), nor is one whose GPU has not got to the collective yet.
std::optional<double> wait_seconds(const RankCommState& r, uint64_t now_ns) {
    if (!r.alive || gpu_behind(r)) return std::nullopt;
    const auto t = wait_start(r);
    if (!t) return std::nullopt;
    return *t < now_ns ? ns_to_s(now_ns - *t) : 0.0;
}

// Seconds without completion progress for a rank whose GPU is still busy before its oldest incomplete collective.
// Such a rank is not waiting inside NCCL, but if it stays there past the timeout it is a stall of its own (its
// GPU is stuck or very slow), even when no other rank waits for it (a one-rank communicator).
std::optional<double> busy_seconds(const RankCommState& r, uint64_t now_ns) {
    if (!r.alive || !gpu_behind(r)) return std::nullopt;
    const auto t = wait_start(r);
    if (!t) return std::nullopt;
    return *t < now_ns ? ns_to_s(now_ns - *t) : 0.0;
}

}  // namespace ncw::verdict

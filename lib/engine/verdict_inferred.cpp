// Inferred progress: what a peer's completion of a collective proves about a rank whose counts lag (lower bounds).
#include "engine/verdict_inferred.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

// Collectives after which, once one rank completed it, every rank has joined it: each rank's result needs every
// other rank's data. (A rooted op can complete on its root while the data still sits in a peer's buffers.)
bool completes_only_when_all_joined(uint8_t op) {
    const OpType t = OpType(op);
    return t == OpType::AllReduce || t == OpType::AllGather || t == OpType::ReduceScatter;
}

}  // namespace

// A rank's "completed" can lag its GPU: its counts are lower bounds (CUDA events, sampled: an op without events of
// its own completes on the record only once a later event on its stream does, which never happens in a hang), and a
// process that died (or was killed) a few milliseconds after its GPU finished an op never saw that op's event.
// Another rank's completion of the same all-reduce (all-gather, reduce-scatter) proves this rank joined it: its GPU
// reached it and gave its part, for the peer's result needs every rank's data. So "reached" is raised to match and
// "completed" with it, one op at a time while the op is such a collective with the same signature. "Completed" is
// then what every peer's progress implies, not a proof: it never goes past a proof of the rank's own (an op
// proven not completed stays so), and exact counts (NCCL's profiler) are left as they are.
// The raises, as (rank index, new "completed"), with a note each; none in the common case, so that the caller copies
// the view only when it must (a live collector analyses communicators of 16,384 ranks several times a second).
std::vector<Raise> inferred_progress(const CommView& view, std::vector<std::string>& notes) {
    std::vector<Raise> raises;
    // Only over ops every rank issued: a completion where some rank never issued the op is not this proof.
    if (view.ranks.empty() || (view.nranks > 0 && view.ranks.size() < size_t(view.nranks))) return raises;
    uint64_t all_issued = UINT64_MAX;
    // The two peers that completed most, as recorded: the best one other than the rank itself is one of them.
    size_t best1 = SIZE_MAX, best2 = SIZE_MAX;
    for (size_t j = 0; j < view.ranks.size(); ++j) {
        const auto& q = view.ranks[j];
        all_issued = std::min(all_issued, q.issued);
        // A rank whose communicator broke is no proof: the abort that follows ends its kernels, and the events
        // count ops its peers never joined as completed.
        if (!q.gpu_tracking || comm_broke(q)) continue;
        if (best1 == SIZE_MAX || q.completed > view.ranks[best1].completed) {
            best2 = best1;
            best1 = j;
        } else if (best2 == SIZE_MAX || q.completed > view.ranks[best2].completed) {
            best2 = j;
        }
    }
    for (size_t i = 0; i < view.ranks.size(); ++i) {
        const RankCommState& r = view.ranks[i];
        if (!r.gpu_tracking || r.issued <= r.completed || (r.progress_exact && r.alive)) continue;
        const size_t b = i == best1 ? best2 : best1;
        if (b == SIZE_MAX || view.ranks[b].completed <= r.completed) continue;
        const RankCommState& best = view.ranks[b];
        const uint64_t from = r.completed + 1;
        uint64_t joined = r.completed;
        uint64_t last = std::min({all_issued, r.issued, best.completed});
        // Its own proofs win: it is not raised past an op proven not reached, nor counted done past one proven not
        // completed.
        if (r.unreached > r.reached && r.unreached <= last) last = r.unreached - 1;
        for (uint64_t s = from; s <= last; ++s) {
            const OpSig* mine = find_sig(r, s);
            const OpSig* theirs = find_sig(best, s);
            if (!mine || !completes_only_when_all_joined(mine->op) || !theirs || theirs->op != mine->op ||
                theirs->count != mine->count || theirs->dtype != mine->dtype)
                break;
            joined = s;
        }
        uint64_t done = joined;
        if (r.uncompleted > r.completed && r.uncompleted <= done) {
            joined = r.uncompleted;  // joined, and inside it: nothing after it is claimed
            done = r.uncompleted - 1;
        }
        if (joined == r.completed || (joined <= r.reached && done == r.completed)) continue;  // nothing new
        const bool many = joined > from;
        std::string note = fmt::format(
            "{}: #{}{} not completed on record; {} completing {} proves it joined {} (a collective every "
            "rank contributes to completes only once every rank joined it)",
            rank_id(r), from, many ? fmt::format("..#{}", joined) : "", rank_id(best), many ? "them" : "it",
            many ? "them" : "it");
        if (done == joined)
            note += ": counted as completed";
        else if (done > r.completed)
            note += fmt::format(": counted as completed up to #{} (#{} is proven not completed)", done, done + 1);
        else
            note += fmt::format(": counted as reached (#{} is proven not completed)", done + 1);
        notes.push_back(std::move(note));
        raises.push_back({i, std::max(r.reached, joined), done});
    }
    return raises;
}

}  // namespace ncw::verdict

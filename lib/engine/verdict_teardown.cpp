// TEARDOWN_HANG: ranks inside ncclCommDestroy, ncclCommFinalize or ncclCommAbort of a communicator for the timeout or
// longer (format 1.9, FileHeader::teardown_*: set as the call begins, cleared as it returns).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

std::vector<Verdict> diagnose_teardown(const CommView& view, uint64_t now_ns, double timeout_s) {
    std::vector<int> inside;
    double longest = 0;
    std::string call = "ncclCommDestroy";
    for (size_t i : by_comm_rank(view)) {
        const RankCommState& r = view.ranks[i];
        if (!r.alive || !r.teardown_since_ns) continue;
        const double for_s = age_s(now_ns, r.teardown_since_ns);
        if (for_s < timeout_s) continue;
        inside.push_back(r.comm_rank);
        if (for_s > longest) {
            longest = for_s;
            call = std::string("nccl") + disk::op_name(uint8_t(r.teardown_op));  // "ncclCommDestroy"
        }
    }
    if (inside.empty()) return {};
    Verdict v;
    v.kind = Kind::TeardownHang;
    v.comm_id = view.comm_id;
    v.culprits = inside;
    v.waiting = inside;
    v.missing = missing_ranks(view);
    v.stalled_for_s = longest;
    v.seq = 0;
    std::vector<int> open, not_begun;  // inside with ops of theirs not completed; alive and not tearing down
    for (size_t i : by_comm_rank(view)) {
        const RankCommState& r = view.ranks[i];
        const bool in = std::binary_search(inside.begin(), inside.end(), r.comm_rank);
        if (in && r.issued > r.completed) open.push_back(r.comm_rank);
        if (!in && r.alive && !r.teardown_since_ns && r.comm_state == uint32_t(disk::CommState::Active))
            not_begun.push_back(r.comm_rank);
        if (in)
            v.evidence.push_back(fmt::format("{}: inside the teardown ({}) for {}; {}", rank_id(r),
                                             disk::op_name(uint8_t(r.teardown_op)),
                                             secs(age_s(now_ns, r.teardown_since_ns)), progress_words(r)));
    }
    v.summary = fmt::format("comm {}: {} {} been inside {} for {}", hex_comm(view.comm_id), ranks_word(inside),
                            inside.size() == 1 ? "has" : "have", call, secs(longest));
    if (!open.empty())
        v.summary +=
            fmt::format("; {} {} ops not completed on record there (NCCL's teardown waits for outstanding work)",
                        ranks_word(open), open.size() == 1 ? "has" : "have");
    else
        v.summary += "; every op they issued here completed";
    if (!not_begun.empty())
        v.summary += fmt::format("; {} {} not begun {} teardown", ranks_word(not_begun),
                                 not_begun.size() == 1 ? "has" : "have", not_begun.size() == 1 ? "its" : "their");
    v.evidence.push_back(
        "a teardown that does not return: NCCL waits there for the communicator's outstanding work (a GPU still busy "
        "before it, a peer that never completes it) or for its own threads; the Python stacks say where each rank "
        "called it");
    return {std::move(v)};
}

}  // namespace ncw::verdict

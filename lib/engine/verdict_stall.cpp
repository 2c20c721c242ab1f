// Stalls: the oldest sequence number some rank has waited in past the timeout, and who holds it up. The rules are
// tried in order (diagnose_stall_inferred); each one that holds adds its verdict, and some end the search.
#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_detail.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using namespace detail;
using disk::OpType;

namespace {

// Collectives after which, once one rank completed it, every rank has joined it: each rank's result needs every
// other rank's data. (A rooted op can complete on its root while the data still sits in a peer's buffers.)
bool completes_only_when_all_joined(uint8_t op) {
    const OpType t = OpType(op);
    return t == OpType::AllReduce || t == OpType::AllGather || t == OpType::ReduceScatter;
}

// A rank's "completed" can lag its GPU: with NCCLWATCH_GPU_SAMPLE=auto an op without events of its own completes on
// the record only once a later event on its stream does, which never happens in a hang; and a process that died (or
// was killed) a few milliseconds after its GPU finished an op never saw that op's event. Another rank's completion
// of the same all-reduce (all-gather, reduce-scatter) proves this rank joined it and finished its part: so
// "completed" is raised to match, one op at a time while the op is such a collective with the same signature.
// The raises, as (rank index, new "completed"), with a note each; none in the common case, so that the caller copies
// the view only when it must (a live collector analyses communicators of 16,384 ranks several times a second).
std::vector<std::pair<size_t, uint64_t>> inferred_progress(const CommView& view, std::vector<std::string>& notes) {
    std::vector<std::pair<size_t, uint64_t>> raises;
    // Only over ops every rank issued: a completion where some rank never issued the op is not this proof.
    if (view.ranks.empty() || (view.nranks > 0 && view.ranks.size() < size_t(view.nranks))) return raises;
    uint64_t all_issued = UINT64_MAX;
    // The two peers that completed most, as recorded: the best one other than the rank itself is one of them.
    size_t best1 = SIZE_MAX, best2 = SIZE_MAX;
    for (size_t j = 0; j < view.ranks.size(); ++j) {
        const auto& q = view.ranks[j];
        all_issued = std::min(all_issued, q.issued);
        if (!q.gpu_tracking) continue;
        if (best1 == SIZE_MAX || q.completed > view.ranks[best1].completed) {
            best2 = best1;
            best1 = j;
        } else if (best2 == SIZE_MAX || q.completed > view.ranks[best2].completed) {
            best2 = j;
        }
    }
    for (size_t i = 0; i < view.ranks.size(); ++i) {
        const RankCommState& r = view.ranks[i];
        if (!r.gpu_tracking || r.issued <= r.completed) continue;
        const size_t b = i == best1 ? best2 : best1;
        if (b == SIZE_MAX || view.ranks[b].completed <= r.completed) continue;
        const RankCommState& best = view.ranks[b];
        const uint64_t from = r.completed + 1;
        uint64_t upto = r.completed;
        for (uint64_t s = from; s <= std::min({all_issued, r.issued, best.completed}); ++s) {
            const OpSig* mine = find_sig(r, s);
            const OpSig* theirs = find_sig(best, s);
            if (!mine || !completes_only_when_all_joined(mine->op) || !theirs || theirs->op != mine->op ||
                theirs->count != mine->count || theirs->dtype != mine->dtype)
                break;
            upto = s;
        }
        if (upto == r.completed) continue;
        notes.push_back(
            fmt::format("{}: #{}{} not completed on record; {} completing {} proves {} done (a "
                        "collective every rank contributes to completes only once every rank joined it)",
                        rank_id(r), from, upto > from ? fmt::format("..#{}", upto) : "", rank_id(best),
                        upto > from ? "them" : "it", upto > from ? "them" : "it"));
        raises.push_back({i, upto});
    }
    return raises;
}

// One stall at W, as every rule sees it.
struct Stall {
    explicit Stall(const CommView& v) : view(v) {}
    const CommView& view;
    uint64_t now_ns = 0;
    std::vector<size_t> order;  // view.ranks in comm-rank order
    std::vector<int> missing;
    size_t nranks = 0;  // the size, or the visible ranks when it is unknown
    uint64_t W = 0;     // the oldest seq that a rank has waited in for at least the timeout
    std::vector<int> waiting;
    double stalled_for = 0;
    Verdict base;      // what every verdict of this stall shares: seq, waiting, op, one evidence line per rank
    std::string head;  // "comm 0x...: 3 of 4 ranks wait in AllReduce #42 (...) for 61.0 s"

    // A verdict of this stall: the head and `what` as its summary, `first` before the per-rank evidence.
    Verdict make(Kind k, std::vector<int> culprits, const std::string& what, std::vector<std::string> first) const {
        Verdict v = base;
        v.kind = k;
        v.culprits = std::move(culprits);
        v.summary = head + "; " + what;
        first.insert(first.end(), v.evidence.begin(), v.evidence.end());
        v.evidence = std::move(first);
        return v;
    }
    bool is_waiting(int comm_rank) const {
        return std::find(waiting.begin(), waiting.end(), comm_rank) != waiting.end();
    }
};

// The stall at the oldest seq some rank has waited in (or been busy before) for the timeout; nothing when no
// collective is outstanding that long.
std::optional<Stall> find_stall(const CommView& view, uint64_t now_ns, double timeout_s) {
    uint64_t W = 0;
    double busy_for = 0;
    for (const auto& r : view.ranks) {
        auto w = wait_seconds(r, now_ns);
        if (const auto b = busy_seconds(r, now_ns); b && *b >= timeout_s) {
            w = b;
            busy_for = std::max(busy_for, *b);
        }
        if (w && *w >= timeout_s && (W == 0 || r.completed + 1 < W)) W = r.completed + 1;
    }
    if (W == 0) return std::nullopt;

    Stall s(view);
    s.now_ns = now_ns;
    s.order = by_comm_rank(view);
    s.missing = missing_ranks(view);
    // nranks 0 means the size is unknown: the visible ranks are then all we can count.
    s.nranks = view.nranks > 0 ? size_t(view.nranks) : view.ranks.size();
    s.W = W;
    // Everyone alive and inside W (issued it, its GPU got to it, not completed it) waits in W, timed out or not yet.
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        if (!r.alive || r.issued < W || r.completed >= W || (r.gpu_tracking && r.reached < W && !reach_unknown(r, W)))
            continue;
        s.waiting.push_back(r.comm_rank);
        if (const auto w = wait_seconds(r, now_ns)) s.stalled_for = std::max(s.stalled_for, *w);
    }
    if (s.waiting.empty()) s.stalled_for = busy_for;

    s.base.comm_id = view.comm_id;
    s.base.seq = W;
    s.base.waiting = s.waiting;
    s.base.missing = s.missing;
    s.base.op = majority_sig(view, s.order, s.waiting, W);
    s.base.stalled_for_s = s.stalled_for;
    for (size_t i : s.order) s.base.evidence.push_back(rank_state_line(view.ranks[i], now_ns, W));
    if (!s.missing.empty())
        s.base.evidence.push_back(
            fmt::format("{} of {}: not visible from here (no rank file)", ranks_word(s.missing), s.nranks));
    s.head = fmt::format("comm {}: {} of {} ranks wait in {} for {}", hex_comm(view.comm_id), s.waiting.size(),
                         s.nranks, sig_short(s.base.op, true), secs(s.stalled_for));
    return s;
}

// A disagreement at W among the ranks that issued it (always checked: it explains a hang in any state).
void add_mismatches_at_w(const Stall& s, std::vector<Verdict>& out) {
    for (auto& m : find_mismatches(s.view)) {
        if (m.seq != s.W) continue;
        m.waiting = s.waiting;
        m.stalled_for_s = s.stalled_for;
        out.push_back(std::move(m));
    }
}

// Rule 1: NCCL itself reported an error. Reported first, but it does not stop the search for who is behind.
std::optional<Verdict> async_error_verdict(const Stall& s) {
    std::vector<int> culprits;
    std::string what;
    for (size_t i : s.order) {
        const auto& r = s.view.ranks[i];
        if (!is_async_error(r.async_error)) continue;
        culprits.push_back(r.comm_rank);
        what += fmt::format("{}{} ({} {})", what.empty() ? "" : ", ", r.comm_rank, nccl_result_name(r.async_error),
                            r.async_error);
    }
    if (culprits.empty()) return std::nullopt;
    return s.make(
        Kind::AsyncError, culprits,
        fmt::format("NCCL reported an asynchronous error on {} {}", culprits.size() == 1 ? "rank" : "ranks", what), {});
}

// What the tie-break of rule 2 found without deciding for EXTRA_OP, for rule 4's NOT_JOINED.
struct TieNotes {
    std::vector<std::string> skipped;    // 1 vs 1 resolved as "the idle rank skipped W": why
    std::vector<std::string> ambiguous;  // 1 vs 1 not resolved: what was looked at
};

// Rule 2: the minority waiting in W is one op ahead (EXTRA_OP). The ranks waiting in W are fewer than the others, and
// every other rank completed W-1 and issued nothing more (idle, or exited cleanly): the op counts diverged, and the
// culprit is the minority that is ahead; naming the majority "behind" would send the user after healthy ranks.
// Counts decide only when the ranks that cannot be seen could not turn the minority into a majority; 1 vs 1 goes to
// the signature windows (tie_break), whose findings go to `notes` when they do not say EXTRA_OP.
std::optional<Verdict> extra_op_verdict(const Stall& s, TieNotes& notes) {
    const CommView& view = s.view;
    const uint64_t W = s.W;
    std::vector<int> at_rest;  // visible ranks that completed exactly W-1 and have nothing outstanding
    bool others_at_rest = !s.waiting.empty();
    size_t exited = 0;
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        if (s.is_waiting(r.comm_rank)) {
            others_at_rest = others_at_rest && r.completed + 1 == W;
            continue;
        }
        const bool rest = r.issued == r.completed && r.completed + 1 == W && (r.alive || r.exited_clean) &&
                          !is_async_error(r.async_error);
        others_at_rest = others_at_rest && rest;
        if (rest) at_rest.push_back(r.comm_rank);
        if (!r.alive) ++exited;
    }
    if (!others_at_rest || at_rest.empty()) return std::nullopt;

    std::vector<std::string> tie_ev;
    Lean lean = Lean::Unknown;
    if (s.waiting.size() + s.missing.size() < at_rest.size()) {
        lean = Lean::ExtraOp;
    } else if (s.missing.empty() && s.waiting.size() == at_rest.size()) {
        const RankCommState* a = nullptr;
        const RankCommState* b = nullptr;
        for (const auto& r : view.ranks) {
            if (r.comm_rank == s.waiting.front()) a = &r;
            if (r.comm_rank == at_rest.front()) b = &r;
        }
        lean = tie_break(*a, *b, W, tie_ev);
        if (lean == Lean::Unknown) {
            // Nothing tells them apart: NOT_JOINED names the idle side as before, and says so.
            tie_ev.push_back(fmt::format("{} vs {}: the op counts alone cannot say which side diverged",
                                         s.waiting.size(), at_rest.size()));
            notes.ambiguous = std::move(tie_ev);
        }
    }
    if (lean == Lean::Skipped)
        notes.skipped = std::move(tie_ev);  // NOT_JOINED carries it first: it names the idle side
    if (lean != Lean::ExtraOp) return std::nullopt;

    std::vector<std::string> ev;
    ev.push_back(fmt::format("{} completed every op {} issued (#{}) and {} nothing outstanding{}", ranks_word(at_rest),
                             at_rest.size() == 1 ? "it" : "they", W - 1, at_rest.size() == 1 ? "has" : "have",
                             exited ? fmt::format("; {} of them exited cleanly", exited) : ""));
    for (int r : s.waiting)
        for (const auto& st : view.ranks)
            if (st.comm_rank == r)
                ev.push_back(fmt::format("{}: the extra op {}", rank_id(st),
                                         find_sig(st, W) ? describe_op(*find_sig(st, W)) : last_op(st)));
    ev.push_back(
        "the op counts diverged: the ahead rank issued one collective more (a different number of "
        "gradient-accumulation micro-steps, a GradScaler skip or a code path taken by some ranks only)");
    if (exited)
        ev.push_back(
            "ranks that exit cleanly while another still issues collectives usually ran out of data first "
            "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
    ev.insert(ev.end(), tie_ev.begin(), tie_ev.end());
    Verdict v = s.make(Kind::ExtraOp, s.waiting, "", ev);
    v.summary = fmt::format(
        "comm {}: {} issued {} that no other rank issued ({} rank{} completed #{} and "
        "issued nothing more); {} for {}",
        hex_comm(view.comm_id), ranks_word(s.waiting), sig_short(s.base.op, true), at_rest.size(),
        at_rest.size() == 1 ? "" : "s", W - 1, s.waiting.size() == 1 ? "it waits in it" : "they wait in it",
        secs(s.stalled_for));
    return v;
}

// Rule 3: a process that is gone before completing W (never issued it, or died inside it): DEAD.
std::optional<Verdict> dead_verdict(const Stall& s) {
    const uint64_t W = s.W;
    std::vector<int> dead;
    std::string dead_what;
    std::vector<std::string> dead_ev;
    bool dead_clean = false;
    for (size_t i : s.order) {
        const auto& r = s.view.ranks[i];
        if (r.alive || r.completed >= W) continue;
        dead.push_back(r.comm_rank);
        std::string how = r.exited_clean ? "exited cleanly (exit handlers ran)"
                                         : fmt::format("is gone (killed?; heartbeat {} old)", secs(r.heartbeat_age_s));
        dead_clean |= r.exited_clean;
        if (r.issued < W)
            dead_what += fmt::format("{}rank {} {} after its last op {}: completed #{}, never issued #{}",
                                     dead_what.empty() ? "" : "; ", r.comm_rank, how, last_op(r), r.completed, W);
        else
            dead_what += fmt::format("{}rank {} {} inside #{}: issued it, never completed it",
                                     dead_what.empty() ? "" : "; ", r.comm_rank, how, W);
        dead_ev.push_back(fmt::format("{}: last op {}", rank_id(r),
                                      find_sig(r, r.issued) ? describe_op(*find_sig(r, r.issued)) : last_op(r)));
    }
    if (dead.empty()) return std::nullopt;
    if (dead_clean)
        dead_ev.push_back(
            "a rank that exits cleanly while the others still issue collectives usually ran out of data first "
            "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
    return s.make(Kind::Dead, dead, dead_what, dead_ev);
}

// Rule 4: a live process that has not issued W: NOT_JOINED (it can hold with rule 3; both are reported). Ranks in
// the same position are described together: "ranks 0,1,2 are behind: completed #42, ...".
std::optional<Verdict> not_joined_verdict(const Stall& s, TieNotes notes) {
    const CommView& view = s.view;
    const uint64_t W = s.W;
    std::vector<int> behind;
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        if (r.alive && r.issued < W) behind.push_back(r.comm_rank);
    }
    if (behind.empty()) return std::nullopt;
    // Groups keep comm-rank order: the group of the lowest rank comes first.
    std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::vector<size_t>>> same;  // (completed, issued)
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        if (!r.alive || r.issued >= W) continue;
        const std::pair<uint64_t, uint64_t> pos{r.completed, r.issued};
        auto it = std::find_if(same.begin(), same.end(), [&](const auto& g) { return g.first == pos; });
        if (it == same.end())
            same.push_back({pos, {i}});
        else
            it->second.push_back(i);
    }
    std::string what;
    const bool skip_resolved = !notes.skipped.empty();  // the windows say the idle side skipped: no "extra" hint
    std::vector<std::string> ev = std::move(notes.skipped);
    bool all_idle = true;
    for (const auto& [pos, idx] : same) {
        const auto [completed, issued] = pos;
        std::vector<int> rs;
        double lo = 1e300, hi = 0;
        for (size_t i : idx) {
            rs.push_back(view.ranks[i].comm_rank);
            const double a = age_s(s.now_ns, view.ranks[i].t_last_issue_ns);
            lo = std::min(lo, a);
            hi = std::max(hi, a);
            ev.push_back(fmt::format("{}: last issued {}", rank_id(view.ranks[i]),
                                     find_sig(view.ranks[i], issued) ? describe_op(*find_sig(view.ranks[i], issued))
                                                                     : last_op(view.ranks[i])));
        }
        const auto& first = view.ranks[idx.front()];
        std::string pos_what = fmt::format("completed #{}", completed);
        if (issued > completed) {
            all_idle = false;
            pos_what += fmt::format(", inside #{}", issued);
        }
        pos_what += fmt::format(", never issued #{}", W);
        std::string last = fmt::format("last issued {}", last_op(first));
        if (issued && first.t_last_issue_ns) {
            const bool one = fmt::format("{:.1f}", lo) == fmt::format("{:.1f}", hi);
            last += one ? fmt::format(", {} ago", secs(hi)) : fmt::format(", {:.1f} to {} ago", lo, secs(hi));
        }
        what += fmt::format("{}{} {} behind: {} ({})", what.empty() ? "" : "; ", ranks_word(rs),
                            rs.size() == 1 ? "is" : "are", pos_what, last);
    }
    if (!notes.ambiguous.empty()) {
        what += fmt::format("; ambiguous ({} vs {}): {} may instead have issued an extra collective", s.waiting.size(),
                            behind.size(), ranks_word(s.waiting));
        ev.insert(ev.end(), notes.ambiguous.begin(), notes.ambiguous.end());
    }
    // A minority waiting on an idle majority: more likely the minority issued one op too many than the majority
    // skipped one (op counts diverged: gradient accumulation, a rank-dependent code path).
    if (all_idle && behind.size() > s.waiting.size() && !skip_resolved) {
        what += fmt::format("; {} idle outside NCCL: {} may have issued an extra collective",
                            behind.size() == 1 ? "it is" : "they are", ranks_word(s.waiting));
        ev.push_back(
            fmt::format("{} idle with every issued op completed while {} {} in #{}: the op counts "
                        "diverged (gradient accumulation, GradScaler or a code path taken by some ranks)",
                        ranks_word(behind), ranks_word(s.waiting), s.waiting.size() == 1 ? "waits" : "wait", W));
    } else if (all_idle && !skip_resolved) {
        ev.push_back(
            fmt::format("{} idle outside NCCL: busy elsewhere (validation, checkpoint: wait it out) or "
                        "skipped the collective (a `continue` before backward())",
                        ranks_word(behind)));
    }
    return s.make(Kind::NotJoined, behind, what, ev);
}

// Rule 5: every live rank issued W, but some GPU has not got to it yet: GPU_NOT_REACHED.
std::optional<Verdict> gpu_not_reached_verdict(const Stall& s) {
    std::vector<int> not_reached;
    std::string nr_what;
    for (size_t i : s.order) {
        const auto& r = s.view.ranks[i];
        if (!r.alive || !r.gpu_tracking || r.reached >= s.W || r.completed >= s.W || reach_unknown(r, s.W)) continue;
        not_reached.push_back(r.comm_rank);
        nr_what +=
            fmt::format("{}rank {}'s GPU has not reached #{} (busy with earlier work on its stream): reached #{}",
                        nr_what.empty() ? "" : "; ", r.comm_rank, s.W, r.reached);
    }
    if (not_reached.empty()) return std::nullopt;
    return s.make(Kind::GpuNotReached, not_reached, nr_what, {});
}

// Rule 6: every visible rank is inside W (or past it) and no one is behind. With ranks out of sight the likely
// culprit is among them (UNKNOWN); with every rank in sight, NCCL itself is stuck (STUCK_IN_NCCL), or a rank whose
// GPU progress is not known is still busy before W.
Verdict unseen_or_stuck_verdict(const Stall& s) {
    const CommView& view = s.view;
    const uint64_t W = s.W;
    if (!s.missing.empty())
        return s.make(Kind::Unknown, s.missing,
                      fmt::format("the {} visible ranks all issued #{} and none is behind; {} not visible from "
                                  "here: the likely culprit{}",
                                  view.ranks.size(), W, ranks_word(s.missing), s.missing.size() == 1 ? "" : "s"),
                      {});
    size_t done = 0;
    std::vector<int> unknown_reach;  // sampled-out ranks: whether their GPU reached W is not known
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        if (r.alive && r.completed >= W) ++done;
        if (r.alive && r.gpu_tracking && r.reached < W && r.completed < W && reach_unknown(r, W))
            unknown_reach.push_back(r.comm_rank);
    }
    std::string what = done == 0 ? fmt::format("all {} ranks are inside #{}; none completed", s.nranks, W)
                                 : fmt::format("all {} ranks issued #{}; {} completed it, {} still inside", s.nranks, W,
                                               done, s.waiting.size());
    what += ": stuck inside NCCL (transport?)";
    std::vector<std::string> stuck_ev{
        "every rank issued and reached the op: check the network path (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GDR/P2P "
        "settings) in the environment audit"};
    if (!unknown_reach.empty()) {
        uint64_t upto = W;
        for (const auto& r : view.ranks)
            if (std::find(unknown_reach.begin(), unknown_reach.end(), r.comm_rank) != unknown_reach.end())
                upto = std::max(upto, r.issued);
        what += fmt::format(", or {} busy with earlier work on {} stream", ranks_word(unknown_reach),
                            unknown_reach.size() == 1 ? "its" : "their");
        if (upto > W)
            what +=
                fmt::format(" (its GPU completed #{} for certain; the op it is in is one of #{}..#{})", W - 1, W, upto);
        stuck_ev.front() = fmt::format(
            "every rank issued the op; whether the GPU of {} reached it is not known: it carried no GPU events of its "
            "own (NCCLWATCH_GPU_SAMPLE=auto samples one op per stream at a time; =all records them for every op)",
            ranks_word(unknown_reach));
    }
    return s.make(Kind::StuckInNccl, {}, what, stuck_ev);
}

// The rules in order over a view whose "completed" counts are final (inferred progress applied).
std::vector<Verdict> diagnose_stall_inferred(const CommView& view, uint64_t now_ns, double timeout_s) {
    const auto stall = find_stall(view, now_ns, timeout_s);
    if (!stall) {
        // No collective outstanding past the timeout: init may not have finished, or only sends/receives are.
        if (auto init = diagnose_init(view, now_ns, timeout_s); !init.empty()) return init;
        return diagnose_p2p_stall(view, now_ns, timeout_s);
    }
    const Stall& s = *stall;
    std::vector<Verdict> out;
    if (auto v = async_error_verdict(s)) out.push_back(std::move(*v));
    TieNotes notes;
    if (auto v = extra_op_verdict(s, notes)) {
        out.push_back(std::move(*v));
        add_mismatches_at_w(s, out);
        return out;
    }
    auto dead = dead_verdict(s);
    auto behind = not_joined_verdict(s, std::move(notes));
    const bool someone_missing_w = dead || behind;
    if (dead) out.push_back(std::move(*dead));
    if (behind) out.push_back(std::move(*behind));
    add_mismatches_at_w(s, out);
    if (someone_missing_w) return out;
    if (auto v = gpu_not_reached_verdict(s)) {
        out.push_back(std::move(*v));
        return out;
    }
    out.push_back(unseen_or_stuck_verdict(s));
    return out;
}

}  // namespace

std::vector<Verdict> diagnose_stall(const CommView& view, uint64_t now_ns, double timeout_s) {
    std::vector<std::string> notes;
    const auto raises = inferred_progress(view, notes);
    if (raises.empty()) return diagnose_stall_inferred(view, now_ns, timeout_s);
    CommView v = view;
    for (const auto& [i, upto] : raises) {
        v.ranks[i].completed = upto;
        v.ranks[i].reached = std::max(v.ranks[i].reached, upto);
    }
    auto out = diagnose_stall_inferred(v, now_ns, timeout_s);
    for (auto& verdict : out) verdict.evidence.insert(verdict.evidence.end(), notes.begin(), notes.end());
    return out;
}

}  // namespace ncw::verdict

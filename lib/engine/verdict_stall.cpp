// Stalls: the oldest sequence number some rank has waited in past the timeout, and who holds it up. The rules are
// tried in order (diagnose_stall_inferred); each one that holds adds its verdict, and some end the search.
#include <fmt/format.h>

#include <algorithm>

#include "engine/causal.h"
#include "engine/verdict_inferred.h"
#include "engine/verdict_mismatch.h"
#include "engine/verdict_p2p.h"
#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "engine/verdict_tie.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

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
    // `waiting` is in comm-rank order (built along `order`): a binary search, not a scan per rank.
    bool is_waiting(int comm_rank) const { return std::binary_search(waiting.begin(), waiting.end(), comm_rank); }
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
        if (!r.alive || r.issued < W || r.completed >= W || proven_not_reached(r, W)) continue;
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
        if (m.seq != s.W || m.kind != Kind::Mismatch) continue;
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
        const bool rest = r.issued == r.completed && r.completed + 1 == W && (r.alive || ended_clean(r)) &&
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
        if (const RankCommState* st = state_of_rank(view, r))
            ev.push_back(fmt::format("{}: the extra op {}", rank_id(*st),
                                     find_sig(*st, W) ? describe_op(*find_sig(*st, W)) : last_op(*st)));
    ev.push_back(
        "the op counts diverged: the ahead rank issued one collective more (a different number of "
        "gradient-accumulation micro-steps, a GradScaler skip or a code path taken by some ranks only)");
    if (exited)
        ev.push_back(
            "ranks that exit cleanly while another still issues collectives usually ran out of data first "
            "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
    ev.insert(ev.end(), tie_ev.begin(), tie_ev.end());
    // One rank one op ahead, every op the same shape: it may have added one earlier that NCCL paired silently.
    std::string pace;
    if (s.waiting.size() == 1)
        if (const RankCommState* st = state_of_rank(view, s.waiting.front()))
            if ((pace = pace_shift(view, *st, W, true)); !pace.empty()) ev.push_back(pace);
    Verdict v = s.make(Kind::ExtraOp, s.waiting, "", ev);
    v.summary = fmt::format(
        "comm {}: {} issued {} that no other rank issued ({} rank{} completed #{} and "
        "issued nothing more); {} for {}",
        hex_comm(view.comm_id), ranks_word(s.waiting), sig_short(s.base.op, true), at_rest.size(),
        at_rest.size() == 1 ? "" : "s", W - 1, s.waiting.size() == 1 ? "it waits in it" : "they wait in it",
        secs(s.stalled_for));
    if (!pace.empty()) v.summary += "; " + pace;
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
        std::string how = end_words(r);  // causal.h: "exited (exit code 3)", "crashed with SIGSEGV (signal 11)", ...
        dead_clean |= ended_clean(r);
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

// Rule 3b: every live rank issued W (no rank is behind) and a member died after completing W on its side: the
// job's first departure (causal.h puts the later ones back), by a crash, an error exit or a kill. Its peers cannot
// complete W without it (its part may not have reached them: NCCL's proxy thread sends what the kernel wrote after
// the kernel ended), nor any op after W. That death is the story, not the transport: DEAD. A rank that exited
// cleanly after completing all it issued is not one: what holds the others is elsewhere (a mismatch that paired its
// ops with theirs, say).
std::optional<Verdict> gone_after_w_verdict(const Stall& s) {
    std::vector<int> gone;
    std::string what;
    std::vector<std::string> ev;
    for (size_t i : s.order) {
        const auto& r = s.view.ranks[i];
        // Completed W (rule 3 took the others); a clean end is not a death.
        if (r.alive || ended_clean(r)) continue;
        gone.push_back(r.comm_rank);
        what += fmt::format(
            "{}rank {} {} after its part of #{} (completed #{}): the others cannot complete #{} "
            "without it",
            what.empty() ? "" : "; ", r.comm_rank, end_words(r), s.W, r.completed, s.W);
        ev.push_back(fmt::format("{}: last op {}", rank_id(r),
                                 find_sig(r, r.issued) ? describe_op(*find_sig(r, r.issued)) : last_op(r)));
    }
    if (gone.empty()) return std::nullopt;
    ev.push_back(fmt::format(
        "a peer that departs can leave its part of an op undelivered (NCCL's proxy thread sends what its kernel "
        "wrote after the kernel ended): the others wait in an op it completed; not proven a transport fault"));
    return s.make(Kind::Dead, gone, what, std::move(ev));
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
    // A rank's latest op a call where the waiting ranks' op of that number is a CUDA graph's replay (or the reverse):
    // NCCL paired a call with a replay. The replays each side has on record over the same numbers say how (proven by
    // the records, whatever the pace says).
    bool graph_launches_differ = false;
    const RankCommState* ref = nullptr;  // the first waiting rank: the others' records
    for (size_t i : s.order)
        if (s.is_waiting(view.ranks[i].comm_rank)) {
            ref = &view.ranks[i];
            break;
        }
    for (const auto& [pos, idx] : same)
        for (size_t i : idx) {
            const RankCommState& b = view.ranks[i];
            const OpSig* mine = b.issued ? find_sig(b, b.issued) : nullptr;
            const OpSig* theirs = ref && mine ? find_sig(*ref, b.issued) : nullptr;
            if (!theirs || OpType(mine->op) == OpType::None || OpType(theirs->op) == OpType::None ||
                theirs->origin == mine->origin)
                continue;
            graph_launches_differ = true;
            // Replays on record in #lo..#issued on both sides (the windows' common part).
            uint64_t lo = b.issued, mine_n = 0, theirs_n = 0;
            for (uint64_t q = b.issued; q >= 1; --q) {
                const OpSig* m = find_sig(b, q);
                const OpSig* t = find_sig(*ref, q);
                if (!m || !t) break;
                lo = q;
                mine_n += m->origin == uint8_t(disk::RecordOrigin::Replay);
                theirs_n += t->origin == uint8_t(disk::RecordOrigin::Replay);
            }
            const auto kind = [](const OpSig* g) {
                return g->origin == uint8_t(disk::RecordOrigin::Replay) ? "a CUDA graph replay" : "a call";
            };
            std::string how;
            if (mine_n != theirs_n) {
                what += fmt::format("; rank {} launched a CUDA graph {} times than {} before its #{}", b.comm_rank,
                                    mine_n < theirs_n ? "fewer" : "more", ranks_word(s.waiting), b.issued);
                how = fmt::format("in #{}..#{} rank {} has {} replay{} of it, rank {} {} ({})", lo, b.issued,
                                  b.comm_rank, mine_n, mine_n == 1 ? "" : "s", ref->comm_rank, theirs_n,
                                  mine_n < theirs_n ? "a skipped replay" : "an added replay");
            } else {
                what += fmt::format("; rank {} launched a CUDA graph in another order than {} before its #{}",
                                    b.comm_rank, ranks_word(s.waiting), b.issued);
                how = fmt::format("in #{}..#{} both have {} replay{} of it, in another order", lo, b.issued, mine_n,
                                  mine_n == 1 ? "" : "s");
            }
            ev.push_back(fmt::format("rank {}'s #{} is {} where {}'s #{} is {}, and NCCL paired the two: {}",
                                     b.comm_rank, b.issued, kind(mine), ranks_word(s.waiting), b.issued, kind(theirs),
                                     how));
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
        // #W a graph's replay on the waiting ranks: the idle ones launched that graph fewer times.
        if (s.base.op.origin == uint8_t(disk::RecordOrigin::Replay))
            ev.push_back(
                fmt::format("{} idle outside NCCL, and #{} is a replay of a CUDA graph on {}: {} launched "
                            "that graph fewer times than they did (a skipped replay), or is busy elsewhere",
                            ranks_word(behind), W, ranks_word(s.waiting), ranks_word(behind)));
        else if (!graph_launches_differ)
            ev.push_back(
                fmt::format("{} idle outside NCCL: busy elsewhere (validation, checkpoint: wait it out) or "
                            "skipped the collective (a `continue` before backward())",
                            ranks_word(behind)));
    }
    // One rank one op behind, every op the same shape: it may have skipped one earlier that NCCL paired silently.
    // Its own pace says where, when one gap stands out (pace_shift).
    if (same.size() == 1 && same.front().second.size() == 1 && all_idle && !skip_resolved) {
        const RankCommState& b = view.ranks[same.front().second.front()];
        if (b.issued + 1 == W)
            if (const std::string alt = pace_shift(view, b, W); !alt.empty()) {
                what += "; " + alt;
                ev.push_back(alt);
            }
    }
    return s.make(Kind::NotJoined, behind, what, ev);
}

// Rule 5: every live rank issued W, but some GPU has provably not got to it yet: GPU_NOT_REACHED. Proven by exact
// counts (NCCL's profiler: reached < W), or by a pending event recorded before an op at or before W (unreached).
std::optional<Verdict> gpu_not_reached_verdict(const Stall& s) {
    std::vector<int> not_reached;
    std::string nr_what;
    std::vector<std::string> ev;
    for (size_t i : s.order) {
        const auto& r = s.view.ranks[i];
        if (!r.alive || !proven_not_reached(r, s.W)) continue;
        not_reached.push_back(r.comm_rank);
        nr_what +=
            fmt::format("{}rank {}'s GPU has not reached #{} (busy with earlier work on its stream): reached #{}",
                        nr_what.empty() ? "" : "; ", r.comm_rank, s.W, r.reached);
        ev.push_back(r.progress_exact
                         ? fmt::format("{}: its counts are exact (NCCL's profiler saw every op's GPU start): #{} "
                                       "never started",
                                       rank_id(r), s.W)
                         : fmt::format("{}: an event recorded on its stream before #{} has not completed: the work "
                                       "before it is still running",
                                       rank_id(r), r.unreached));
    }
    if (not_reached.empty()) return std::nullopt;
    return s.make(Kind::GpuNotReached, not_reached, nr_what, std::move(ev));
}

// "the GPU of rank 3" / "the GPUs of ranks 0,2"
std::string gpus_of(const std::vector<int>& ranks) {
    return (ranks.size() == 1 ? "the GPU of " : "the GPUs of ") + ranks_word(ranks);
}

// "CUDA events, sampled" for the ranks given, each basis once.
std::string bases_of(const CommView& view, const std::vector<int>& ranks) {
    std::vector<std::string> b;
    for (int cr : ranks)
        if (const RankCommState* r = state_of_rank(view, cr))
            if (auto w = bounds_basis(*r); std::find(b.begin(), b.end(), w) == b.end()) b.push_back(std::move(w));
    std::string out;
    for (const auto& w : b) out += (out.empty() ? "" : "; ") + w;
    return out;
}

// Rule 6: every visible rank issued W and none is provably behind. With ranks out of sight the likely culprit is
// among them (UNKNOWN). With every rank in sight: STUCK_IN_NCCL when every rank that has not completed W is proven
// inside it (its call blocks in NCCL, or its GPU reached W and provably has not completed it); otherwise UNKNOWN,
// which says what is not known and blames nothing.
// Every rank inside the op but the last to join has been there less than the timeout: nothing is proven yet (a rank
// that came late, then a first op's connection set-up, is not a transport that hangs). nullopt then: no verdict.
std::optional<Verdict> unseen_or_stuck_verdict(const Stall& s, double timeout_s) {
    const CommView& view = s.view;
    const uint64_t W = s.W;
    if (!s.missing.empty())
        return s.make(Kind::Unknown, s.missing,
                      fmt::format("the {} visible ranks all issued #{} and none is behind; {} not visible from "
                                  "here: the likely culprit{}",
                                  view.ranks.size(), W, ranks_word(s.missing), s.missing.size() == 1 ? "" : "s"),
                      {});
    std::vector<int> done;        // completed W
    std::vector<int> reach_open;  // whether their GPU reached W is not known
    std::vector<int> done_open;   // their GPU reached W; whether it completed W is not known
    std::vector<int> inside;      // proven inside W
    uint64_t upto = W;            // the latest op a rank of reach_open may be busy with
    for (size_t i : s.order) {
        const auto& r = view.ranks[i];
        // A rank that completed W and then left proves it done all the same.
        if (r.completed >= W) {
            done.push_back(r.comm_rank);
            continue;
        }
        if (!r.alive) continue;
        if (proven_inside(r, W)) {
            inside.push_back(r.comm_rank);
        } else if (proven_reached(r, W)) {
            done_open.push_back(r.comm_rank);
        } else {
            reach_open.push_back(r.comm_rank);
            // Not past an op its GPU is proven not to have reached.
            const bool bound = r.unreached > r.reached && r.unreached > W && r.unreached <= r.issued;
            upto = std::max(upto, bound ? r.unreached - 1 : r.issued);
        }
    }
    if (reach_open.empty() && done_open.empty()) {
        double newest = timeout_s;
        for (size_t i : s.order)
            if (const auto w = wait_seconds(view.ranks[i], s.now_ns); w && view.ranks[i].completed < W)
                newest = std::min(newest, *w);
        if (newest < timeout_s) return std::nullopt;
        if (done.empty())
            return s.make(
                Kind::StuckInNccl, {},
                fmt::format("all {} ranks are inside #{}; none completed: stuck inside NCCL "
                            "(transport?)",
                            s.nranks, W),
                {"every rank is proven inside the op (its call has not returned, or its GPU reached the op and "
                 "provably has not completed it): check the network path (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, "
                 "GDR/P2P settings) in the environment audit"});
        // Some rank completed the op the others are proven inside: one op cannot be both, so the ranks' ops were not
        // paired as their numbers say. Not the transport: it carried that rank's part to the end.
        Verdict v = s.make(
            Kind::Unknown, {},
            fmt::format("{} completed #{} while {} {} proven inside it: NCCL paired their ops otherwise than their "
                        "numbers say; no rank is proven to hold it up",
                        ranks_word(done), W, ranks_word(inside), inside.size() == 1 ? "is" : "are"),
            {fmt::format("not STUCK_IN_NCCL: {} completed #{}, so the transport carried it; an op issued outside "
                         "the numbering (a CUDA graph's replay) or a skipped or added op of one shape that NCCL "
                         "paired silently makes one rank's #{} another's #{} or #{}",
                         ranks_word(done), W, W, W - 1, W + 1)});
        v.completed_it = std::move(done);
        return v;
    }

    // Not proven either way: say what is not known, and what is.
    std::string what;
    if (!reach_open.empty()) {
        what += fmt::format("whether {} reached #{} is not known: {} counts are lower bounds ({})", gpus_of(reach_open),
                            W, reach_open.size() == 1 ? "its" : "their", bases_of(view, reach_open));
        if (upto > W)
            what += fmt::format("; the op {} busy with or {} in is one of #{}..#{}",
                                reach_open.size() == 1 ? "it is" : "they are",
                                reach_open.size() == 1 ? "waits" : "wait", W, upto);
    }
    if (!done_open.empty())
        what += fmt::format("{}{} reached #{}; whether {} completed it is not known: {} counts are lower bounds ({})",
                            what.empty() ? "" : "; ", gpus_of(done_open), W, done_open.size() == 1 ? "it" : "they",
                            done_open.size() == 1 ? "its" : "their", bases_of(view, done_open));
    if (!inside.empty())
        what += fmt::format("; {} {} proven inside it", ranks_word(inside), inside.size() == 1 ? "is" : "are");
    what += "; no rank is proven to hold it up";
    std::vector<std::string> ev{fmt::format(
        "not STUCK_IN_NCCL: that needs every rank proven inside #{} (its call blocking in NCCL, or its GPU past the "
        "op's start and provably not at its end); not GPU_NOT_REACHED: no rank is proven short of #{}",
        W, W)};
    const std::string bases = bases_of(view, reach_open.empty() ? done_open : reach_open);
    if (bases.find("sampled") != std::string::npos)
        ev.push_back(
            "NCCLWATCH_GPU_SAMPLE=auto gives one op per stream at a time CUDA events of its own; =all gives every op "
            "its own (about 0.5 us each); NCCL's profiler interface (NCCL 2.26 or later) makes the counts exact");
    else
        ev.push_back("NCCL's profiler interface (NCCL 2.26 or later) makes the counts exact");
    return s.make(Kind::Unknown, {}, what, std::move(ev));
}

std::vector<Verdict> diagnose_stall_collective(const Stall& s, double timeout_s);

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
    // Ranks held in sends and receives the collective waits behind (a cycle of them, a pair whose sizes disagree):
    // those lead, and what the collective's counts say follows from them.
    auto blockers = p2p_blockers(view, now_ns, timeout_s);
    // A send or receive still short of the timeout may yet be the cause: judged once it is past it (or done).
    if (blockers.empty() && p2p_wait_maturing(view, now_ns, timeout_s, s.stalled_for)) return {};
    if (blockers.empty()) {
        // A rank behind the collective because it waits in a send (receive) whose peer never posted the match: its
        // first ever to a peer outside the pattern (a wrong peer index), or one the peer left out (a ring's missing
        // irecv) while it went on into the collective. The send holds the collective; its peer is the cause.
        auto p2p = diagnose_p2p_stall(view, now_ns, timeout_s, false);
        if (!p2p.empty()) {
            Verdict& v = p2p.front();
            const bool wrong_peer = v.kind == Kind::Mismatch && v.op.root >= 0 && v.seq == 1 && !v.culprits.empty() &&
                                    !s.is_waiting(v.culprits.front());
            // Held: never issued the collective (blocked in the send's call), or issued it on the stream where the
            // open send was issued before it, so that its GPU reaches the collective only after the send.
            auto held = [&](int comm_rank) {
                if (!s.is_waiting(comm_rank)) return true;
                const RankCommState* r = state_of_rank(view, comm_rank);
                if (!r) return false;
                const auto at_w =
                    std::find_if(r->recent.begin(), r->recent.end(), [&](const OpSig& g) { return g.seq == s.W; });
                return at_w != r->recent.end() && open_p2p_before(*r, at_w->stream, at_w->t_issue_ns);
            };
            // UNKNOWN too, where it names the peer out of sight that the sends and receives wait on (one node's view
            // of an all-to-all whose other node's rank never joined): the collective's GPUs are behind those ops,
            // not busy with work of their own.
            const bool holds = (v.kind == Kind::Mismatch || v.kind == Kind::NotJoined || v.kind == Kind::Dead ||
                                v.kind == Kind::Unknown) &&
                               !v.culprits.empty() && std::any_of(v.waiting.begin(), v.waiting.end(), held);
            if (wrong_peer || holds) blockers.push_back(std::move(v));
        }
    }
    if (!blockers.empty()) {
        std::vector<Verdict> rest = diagnose_stall_collective(s, timeout_s);
        // The collective rules repeat a pair's MISMATCH found at the stalled seq: the blocker's copy stays.
        rest.erase(std::remove_if(rest.begin(), rest.end(), [](const Verdict& v) { return v.pair_sizes.has_value(); }),
                   rest.end());
        const std::string cause = blockers.front().summary;
        for (auto& b : blockers) {
            // Who waits: in the collective, and in the sends and receives that hold it.
            b.waiting.insert(b.waiting.end(), s.waiting.begin(), s.waiting.end());
            for (const auto& r : view.ranks)
                for (const auto& e : r.p2p)
                    if (e.sends_issued > e.sends_completed || e.recvs_issued > e.recvs_completed)
                        b.waiting.push_back(r.comm_rank);
            std::sort(b.waiting.begin(), b.waiting.end());
            b.waiting.erase(std::unique(b.waiting.begin(), b.waiting.end()), b.waiting.end());
            b.stalled_for_s = std::max(b.stalled_for_s, s.stalled_for);
        }
        for (auto& v : rest) {
            v.consequence = true;
            v.consequence_of = cause;
        }
        out = std::move(blockers);
        out.insert(out.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
        return out;
    }
    return diagnose_stall_collective(s, timeout_s);
}

// The collective rules over a stall.
std::vector<Verdict> diagnose_stall_collective(const Stall& s, double timeout_s) {
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
    if (auto v = gone_after_w_verdict(s)) {
        out.push_back(std::move(*v));
        return out;
    }
    if (auto v = gpu_not_reached_verdict(s)) {
        out.push_back(std::move(*v));
        return out;
    }
    if (auto v = unseen_or_stuck_verdict(s, timeout_s)) out.push_back(std::move(*v));
    return out;
}

}  // namespace

std::vector<Verdict> diagnose_stall(const CommView& view, uint64_t now_ns, double timeout_s) {
    std::vector<std::string> notes;
    const auto raises = inferred_progress(view, notes);
    if (raises.empty()) return diagnose_stall_inferred(view, now_ns, timeout_s);
    // The raised counts are put in the view for the rules and taken back after (also when they throw): a copy of the
    // view, every rank's signatures with it, cost more than the rules at 131,072 ranks. No view is const at its
    // origin (job_view and suspicion build theirs), and the analysis is one thread.
    struct Raised {
        CommView& v;
        std::vector<Raise> was;  // per raise: the rank's counts before it
        ~Raised() {
            for (const Raise& w : was) {
                v.ranks[w.index].reached = w.reached;
                v.ranks[w.index].completed = w.completed;
            }
        }
    } raised{const_cast<CommView&>(view), {}};
    raised.was.reserve(raises.size());
    for (const Raise& r : raises) {
        auto& rank = raised.v.ranks[r.index];
        raised.was.push_back({r.index, rank.reached, rank.completed});
        rank.reached = r.reached;
        rank.completed = r.completed;
    }
    auto out = diagnose_stall_inferred(view, now_ns, timeout_s);
    for (auto& verdict : out) verdict.evidence.insert(verdict.evidence.end(), notes.begin(), notes.end());
    return out;
}

}  // namespace ncw::verdict

// Mismatches: ranks that disagree on the signature of one sequence number, and the groups they form.
#include "engine/verdict_mismatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_set>

#include "engine/verdict_drift.h"
#include "engine/verdict_p2p.h"
#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

Key key_of(const OpSig& s) {
    const auto t = OpType(s.op);
    return Key{s.op, s.dtype, s.count, disk::is_rooted(t) ? s.root : -1, disk::has_redop(t) ? s.redop : 0};
}

namespace {

// One group of ranks that issued the same signature at one seq.
struct Group {
    Key key;
    const OpSig* sig;  // the lowest rank's copy
    std::vector<int> ranks;
};

// Groups sorted by size (largest first), ties broken by lowest comm rank.
std::vector<Group> group_by_sig(const std::vector<std::pair<int, const OpSig*>>& entries) {
    std::vector<Group> groups;
    for (const auto& [rank, sig] : entries) {
        const Key k = key_of(*sig);
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == k; });
        if (it == groups.end())
            groups.push_back(Group{k, sig, {rank}});
        else
            it->ranks.push_back(rank);
    }
    for (auto& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
        if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
        return a.ranks.front() < b.ranks.front();
    });
    return groups;
}

// "count: rank 1 = 524288; ranks 0,2,3 = 1048576" for each field in which the groups differ.
void field_evidence(const std::vector<Group>& groups, int nranks, std::vector<std::string>& ev) {
    auto line = [&](const char* field, auto applies, auto value) {
        std::vector<std::string> parts;
        std::vector<std::string> distinct;
        for (const auto& g : groups) {
            if (!applies(g)) continue;
            std::string v = value(g);
            if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
            parts.push_back(fmt::format("{} = {}", ranks_word(g.ranks), v));
        }
        if (distinct.size() < 2) return;
        std::string out = fmt::format("{}: ", field);
        for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
        ev.push_back(std::move(out));
    };
    auto always = [](const Group&) { return true; };
    line("op", always, [](const Group& g) { return std::string(disk::op_name(g.key.op)); });
    line("dtype", always, [](const Group& g) { return std::string(disk::dtype_name(g.key.dtype)); });
    line("count", always, [](const Group& g) { return std::to_string(g.key.count); });
    // With different dtypes the counts alone mislead: the buffers' sizes in bytes say whether the data lines up.
    const bool dtypes_differ = std::any_of(groups.begin(), groups.end(),
                                           [&](const Group& g) { return g.key.dtype != groups.front().key.dtype; });
    if (dtypes_differ) {
        auto bytes = [](const Group& g) { return g.key.count * disk::dtype_size(g.key.dtype); };
        std::string out = "bytes (count x dtype size): ";
        bool same = true;
        for (size_t i = 0; i < groups.size(); ++i) {
            out += fmt::format("{}{} = {}", i ? "; " : "", ranks_word(groups[i].ranks), bytes(groups[i]));
            same = same && bytes(groups[i]) == bytes(groups.front());
        }
        out += same ? " (equal: the buffers line up, the values are reinterpreted)" : " (differ)";
        ev.push_back(std::move(out));
    }
    // AllGather and ReduceScatter take the count per rank; a rank that passes the total is off by the comm size.
    if (nranks > 1) {
        const Group& major = groups.front();
        const auto t = OpType(major.key.op);
        if (t == OpType::AllGather || t == OpType::ReduceScatter) {
            for (size_t i = 1; i < groups.size(); ++i) {
                const Group& g = groups[i];
                if (g.key.op != major.key.op) continue;
                const char* what = t == OpType::AllGather ? "send count" : "receive count";
                if (g.key.count == major.key.count * uint64_t(nranks))
                    ev.push_back(
                        fmt::format("{}: {} passed {} = {} x {} ranks: the total where {} takes the per-rank "
                                    "{}",
                                    disk::op_name(g.key.op), ranks_word(g.ranks), g.key.count, major.key.count, nranks,
                                    disk::op_name(g.key.op), what));
                else if (major.key.count == g.key.count * uint64_t(nranks))
                    ev.push_back(
                        fmt::format("{}: {} passed {} = {} x {} ranks: the total where {} takes the per-rank "
                                    "{}",
                                    disk::op_name(g.key.op), ranks_word(major.ranks), major.key.count, g.key.count,
                                    nranks, disk::op_name(g.key.op), what));
            }
        }
    }
    line(
        "root", [](const Group& g) { return disk::is_rooted(OpType(g.key.op)); },
        [](const Group& g) { return std::to_string(g.key.root); });
    line(
        "redop", [](const Group& g) { return disk::has_redop(OpType(g.key.op)); },
        [](const Group& g) { return std::string(disk::redop_name(g.key.redop)); });
}

}  // namespace

// The signature of `seq` as most of `ranks` recorded it (tie: lowest rank); falls back to any visible rank's copy.
OpSig majority_sig(const CommView& v, const std::vector<size_t>& order, const std::vector<int>& ranks, uint64_t seq) {
    std::vector<std::pair<int, const OpSig*>> entries;
    const OpSig* any = nullptr;
    // Sorted once, searched per rank: the ranks are every waiting rank of a stall (O(ranks^2) as a scan each).
    std::vector<int> among(ranks);
    std::sort(among.begin(), among.end());
    for (size_t i : order) {
        const auto& r = v.ranks[i];
        const OpSig* s = find_sig(r, seq);
        if (!s) continue;
        if (!any) any = s;
        if (std::binary_search(among.begin(), among.end(), r.comm_rank)) entries.emplace_back(r.comm_rank, s);
    }
    if (!entries.empty()) return *group_by_sig(entries).front().sig;
    if (any) return *any;
    OpSig none;
    none.seq = seq;
    return none;
}

std::vector<Verdict> find_mismatches(const CommView& view) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);

    // seq -> (comm rank, signature), ranks in comm-rank order. Only collectives are matched: p2p ops legitimately
    // differ between peers and lifecycle events take no sequence number. Two passes, for a world of 131,072 ranks with
    // 64 signatures each: the first finds the seqs at which any two signatures differ, the second gathers the entries
    // of those seqs only (mostly none). A rank contributes one signature per seq (the first, should it repeat). A set:
    // a rank's history can hold thousands (a linear search made this quadratic: 16 s of a 4,096-file analysis).
    // The reader's window rises strictly (each seq once), and then needs no set: the first pass finds out per rank.
    std::unordered_set<uint64_t> seen;
    std::vector<uint8_t> rising(view.ranks.size(), 0);
    auto each_sig = [&](const RankCommState& r, bool up, auto&& fn) {
        if (!up) seen.clear();
        for (const auto& s : r.recent) {
            if (s.seq == 0 || !disk::is_collective(OpType(s.op))) continue;
            if (!up && !seen.insert(s.seq).second) continue;
            fn(s);
        }
    };
    struct First {
        Key key;
        bool differs = false;
    };
    // By seq. A rank's rising window walks it from one look-up: the next seq is mostly the next entry.
    std::map<uint64_t, First> first;
    auto hint = first.end();
    // Idempotent per rank: a rank's signatures may be noted twice.
    const auto note_first = [&](const OpSig& s) {
        const Key k = key_of(s);
        auto it = hint;
        if (it == first.end() || it->first != s.seq) {
            it = first.lower_bound(s.seq);
            if (it == first.end() || it->first != s.seq) {
                hint = std::next(first.emplace_hint(it, s.seq, First{k}));
                return;
            }
        }
        if (!it->second.differs && it->second.key != k) it->second.differs = true;
        hint = std::next(it);
    };
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        uint64_t prev = 0;
        bool up = true;
        hint = first.end();
        for (const auto& s : r.recent) {
            if (s.seq <= prev) {
                up = false;
                break;
            }
            prev = s.seq;
            if (disk::is_collective(OpType(s.op))) note_first(s);
        }
        if (!up)
            each_sig(r, false, [&](const OpSig& s) {
                hint = first.end();
                note_first(s);
            });
        rising[i] = up;
    }
    std::map<uint64_t, std::vector<std::pair<int, const OpSig*>>> by_seq;
    std::map<int, const RankCommState*> state_of;
    if (std::any_of(first.begin(), first.end(), [](const auto& f) { return f.second.differs; }))
        for (size_t i : order) {
            const auto& r = view.ranks[i];
            state_of.emplace(r.comm_rank, &r);
            each_sig(r, rising[i], [&](const OpSig& s) {
                if (first[s.seq].differs) by_seq[s.seq].emplace_back(r.comm_rank, &s);
            });
        }

    std::vector<Verdict> out;
    for (const auto& [seq, entries] : by_seq) {
        if (entries.size() < 2) continue;
        const auto groups = group_by_sig(entries);
        if (groups.size() < 2) continue;

        Verdict v;
        v.kind = Kind::Mismatch;
        v.comm_id = view.comm_id;
        v.seq = seq;
        v.missing = missing;
        v.op = *groups.front().sig;

        // With no strict majority (1 vs 1, 2 vs 2, ...) nothing says which side is wrong: name every rank rather
        // than blame one side arbitrarily.
        const bool tie = groups[0].ranks.size() == groups[1].ranks.size();
        std::string what;
        if (tie) {
            for (const auto& g : groups) v.culprits.insert(v.culprits.end(), g.ranks.begin(), g.ranks.end());
            what = "ranks disagree: ";
            for (size_t i = 0; i < groups.size(); ++i)
                what += fmt::format("{}{} issued {}", i ? ", " : "", ranks_word(groups[i].ranks),
                                    sig_short(*groups[i].sig, false));
        } else {
            for (size_t i = 1; i < groups.size(); ++i) {
                v.culprits.insert(v.culprits.end(), groups[i].ranks.begin(), groups[i].ranks.end());
                what += fmt::format("{}{} issued {}", i > 1 ? ", " : "", ranks_word(groups[i].ranks),
                                    sig_short(*groups[i].sig, false));
            }
            what += fmt::format(" but {} issued {}", ranks_word(groups[0].ranks), sig_short(*groups[0].sig, false));
        }
        std::sort(v.culprits.begin(), v.culprits.end());
        v.summary = fmt::format("comm {}: MISMATCH at #{}: {}", hex_comm(view.comm_id), seq, what);

        field_evidence(groups, view.nranks, v.evidence);
        for (const auto& [rank, sig] : entries)
            v.evidence.push_back(rank_id(*state_of[rank]) + ": " + describe_op(*sig));
        out.push_back(std::move(v));
    }
    // Differences that a drift explains (a skipped or an added op in a run of same-shaped ones): the drift's verdict
    // leads, those MISMATCHes are its consequences.
    if (!out.empty()) {
        for (auto& v : drift_verdicts(view)) out.push_back(std::move(v));
        fold_drifts(out);
    }
    // A MISMATCH of one rank that no drift explains, where the job hung at once: the skip or extra op it may also be.
    for (auto& v : out) {
        if (v.kind != Kind::Mismatch || v.consequence || v.culprits.size() != 1) continue;
        const RankCommState* odd = state_of_rank(view, v.culprits.front());
        const RankCommState* other = nullptr;
        for (size_t i : order)
            if (view.ranks[i].comm_rank != v.culprits.front()) {
                const OpSig* s = find_sig(view.ranks[i], v.seq);
                if (s && key_of(*s) == key_of(v.op)) {
                    other = &view.ranks[i];
                    break;
                }
            }
        if (!odd || !other) continue;
        if (const std::string alt = drift_alternative(*odd, *other, v.seq); !alt.empty()) {
            v.summary += "; " + alt;
            v.evidence.push_back(alt + " (the signatures since the ranks last agreed one for one fit both)");
        }
    }
    // std::map iterates in seq order; the p2p pairs come after the collectives.
    for (auto& v : p2p_mismatches(view)) out.push_back(std::move(v));
    return out;
}

}  // namespace ncw::verdict

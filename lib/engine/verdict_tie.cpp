// Telling an extra op from a skipped one when the counts are symmetric (1 vs 1): the op pattern and the issue-time
// gaps.
#include "engine/verdict_tie.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_mismatch.h"
#include "engine/verdict_ranks.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

// The matching keys of the rank's signatures for seqs lo..hi; empty when one is not in the window.
std::vector<Key> keys_between(const RankCommState& r, uint64_t lo, uint64_t hi) {
    std::vector<Key> out;
    for (uint64_t q = lo; q <= hi && q != 0; ++q) {
        const OpSig* s = find_sig(r, q);
        if (!s || OpType(s->op) == OpType::None) return {};
        out.push_back(key_of(*s));
    }
    return out;
}

// The shortest period p (at most half the length, so the pattern shows at least twice) with v[i] == v[i+p]; 0: none.
size_t period_of(const std::vector<Key>& v) {
    for (size_t p = 1; 2 * p <= v.size(); ++p) {
        bool ok = true;
        for (size_t i = 0; ok && i + p < v.size(); ++i) ok = v[i] == v[i + p];
        if (ok) return p;
    }
    return 0;
}

constexpr uint64_t kTieWindow = 64;  // = disk::kRecentSigs: the window a live rank keeps

// Gaps between consecutive issue times in the window, as ratios of the rank's median gap (before seq `upto`).
struct GapShape {
    double shortest = 0;  // smallest gap / median gap
    double longest = 0;
    uint64_t shortest_at = 0;  // the seq that ends the gap
    int n_short = 0;           // gaps under 0.5x the median
    int n_long = 0;            // gaps over 1.6x the median
    uint64_t longest_at = 0;
    bool known = false;
};

GapShape gap_shape(const RankCommState& r, uint64_t from, uint64_t upto) {
    std::vector<std::pair<uint64_t, uint64_t>> t;  // (seq, issue time)
    for (const auto& s : r.recent)
        if (s.seq >= from && s.seq && s.seq <= upto && s.t_issue_ns) t.emplace_back(s.seq, s.t_issue_ns);
    std::sort(t.begin(), t.end());
    std::vector<std::pair<double, uint64_t>> gaps;
    for (size_t i = 1; i < t.size(); ++i)
        if (t[i].first == t[i - 1].first + 1 && t[i].second >= t[i - 1].second)
            gaps.emplace_back(double(t[i].second - t[i - 1].second), t[i].first);
    GapShape g;
    if (gaps.size() < 4) return g;
    std::vector<double> sorted;
    for (const auto& x : gaps) sorted.push_back(x.first);
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (median <= 0) return g;
    // Sub-millisecond gaps are ops issued back to back (no compute between them): their ratios are noise.
    if (median < 1e6) return g;
    g.known = true;
    g.shortest = 1e300;
    for (const auto& [gap, seq] : gaps) {
        if (gap / median < g.shortest) g.shortest = gap / median, g.shortest_at = seq;
        if (gap / median > g.longest) g.longest = gap / median, g.longest_at = seq;
        if (gap / median < 0.5) ++g.n_short;
        if (gap / median > 1.6) ++g.n_long;
    }
    return g;
}

}  // namespace

// `ahead` waits in W, `idle` completed W-1 and issued nothing more. Either `ahead` issued one op too many or `idle`
// skipped one: the same counts. The periodic pattern of a training loop and the issue-time gaps tell them apart.
Lean tie_break(const RankCommState& ahead, const RankCommState& idle, uint64_t W, std::vector<std::string>& ev) {
    Lean by_pattern = Lean::Unknown;
    uint64_t lo_a = W, lo_i = W;
    for (const auto& s : ahead.recent)
        if (s.seq) lo_a = std::min(lo_a, s.seq);
    for (const auto& s : idle.recent)
        if (s.seq) lo_i = std::min(lo_i, s.seq);
    // The last window's worth only: offline, `recent` may also hold older ring history, whose noise is not this tie's.
    const uint64_t lo = std::max({lo_a, lo_i, W > kTieWindow ? W - kTieWindow : uint64_t(0)});
    const auto a = keys_between(ahead, lo, W);
    const auto b = keys_between(idle, lo, W - 1);
    if (W > lo + 2 && !a.empty() && !b.empty()) {
        size_t k = 0;  // first index where they differ (b.size(): none)
        while (k < b.size() && a[k] == b[k]) ++k;
        bool aligned = true;  // the rest of `a` is `b` shifted by one: a single op inserted (or skipped) at k
        for (size_t i = k; aligned && i < b.size(); ++i) aligned = a[i + 1] == b[i];
        const uint64_t at = lo + k;
        const size_t pa = period_of(a), pb = period_of(b);
        if (!aligned) {
            ev.push_back(fmt::format("op patterns of rank {} and rank {} differ in more than one op from #{} on",
                                     ahead.comm_rank, idle.comm_rank, at));
        } else if (k == b.size()) {
            // Same ops up to W-1: is W the op the pattern continues with?
            if (pb && !(a[k] == b[k - pb])) {
                by_pattern = Lean::ExtraOp;
                ev.push_back(fmt::format(
                    "rank {} issued #{} .. #{} with a period of {} op{}; #{} on rank {} does not continue it: an "
                    "op inserted",
                    idle.comm_rank, lo, W - 1, pb, pb == 1 ? "" : "s", W, ahead.comm_rank));
            }
        } else if (pb && !pa) {
            by_pattern = Lean::ExtraOp;
            ev.push_back(
                fmt::format("rank {}'s ops #{} .. #{} are rank {}'s periodic pattern (period {}) with one op "
                            "inserted at #{}",
                            ahead.comm_rank, lo, W, idle.comm_rank, pb, at));
        } else if (pa && !pb) {
            by_pattern = Lean::Skipped;
            ev.push_back(
                fmt::format("rank {}'s ops #{} .. #{} are rank {}'s periodic pattern (period {}) with the op "
                            "at #{} missing",
                            idle.comm_rank, lo, W - 1, ahead.comm_rank, pa, at));
        }
    }

    Lean by_time = Lean::Unknown;
    const GapShape ga = gap_shape(ahead, lo, W), gi = gap_shape(idle, lo, W - 1);
    if (ga.known && gi.known) {
        // One anomaly on one side and a regular rhythm on the other; anything noisier decides nothing.
        const bool short_in_ahead = ga.n_short == 1 && gi.n_short == 0 && gi.n_long == 0;
        const bool double_in_idle = gi.n_long == 1 && gi.longest < 2.6 && ga.n_short == 0 && ga.n_long == 0;
        if (short_in_ahead && !double_in_idle) {
            by_time = Lean::ExtraOp;
            ev.push_back(
                fmt::format("rank {} issued #{} {:.2f}x its median gap after the op before: unusually short, "
                            "as an extra op; rank {} shows no skipped step (longest gap {:.2f}x)",
                            ahead.comm_rank, ga.shortest_at, ga.shortest, idle.comm_rank, gi.longest));
        } else if (double_in_idle && !short_in_ahead) {
            by_time = Lean::Skipped;
            ev.push_back(
                fmt::format("rank {} issued #{} {:.2f}x its median gap after the op before: about one step "
                            "missing; rank {} shows no unusually short gap (shortest {:.2f}x)",
                            idle.comm_rank, gi.longest_at, gi.longest, ahead.comm_rank, ga.shortest));
        }
    }
    if (by_pattern == Lean::Unknown) return by_time;
    if (by_time == Lean::Unknown || by_time == by_pattern) return by_pattern;
    ev.push_back("the op pattern and the issue-time gaps point at different ranks");
    return Lean::Unknown;
}

}  // namespace ncw::verdict

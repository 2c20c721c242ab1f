// Drift: a rank that skipped or added collectives in a run of same-shaped ones. NCCL pairs collectives by their order
// on the communicator, not by their shape, so after a skip the rank's ops complete silently with the others' next
// ones, and the ranks disagree only at the first op of another shape, many ops later. Aligning the rank's recent
// stream against the others' names where it went wrong; the later MISMATCH and the hang it ends in follow from it.
#include "engine/verdict_drift.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/verdict_mismatch.h"
#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

using Stream = std::map<uint64_t, const OpSig*>;  // seq -> signature, collectives only, one per seq

Stream stream_of(const std::vector<OpSig>& sigs) {
    Stream out;
    for (const auto& s : sigs)
        if (s.seq && disk::is_collective(OpType(s.op))) out.emplace(s.seq, &s);  // the first copy of a seq
    return out;
}

const OpSig* at(const Stream& s, uint64_t seq) {
    const auto it = s.find(seq);
    return it == s.end() ? nullptr : it->second;
}

// One shift tried: where the shifted agreement holds, and what it explains.
struct Fit {
    bool ok = false;
    Drift d;
};

// odd[j] against others[j + k], for the seqs of odd. The drift begins at s in [first, hi]: before s odd agrees with
// the others one for one (no difference before hi, the first one), and from s on (skip) or after the -k ops it added
// at s (extra) it agrees once shifted. Every comparison from the latest possible start on is counted in `aligned`.
Fit try_shift(const Stream& odd, const Stream& others, int k, uint64_t hi, size_t differs, uint64_t last_differ) {
    Fit f;
    const uint64_t m = k < 0 ? uint64_t(-k) : 0;  // ops added
    // The earliest j from which odd[j] == others[j + k] holds to the end of what both show, walking back from there;
    // a hole in either window (a seq not recorded, ring records lost, digests that skipped it) ends the walk too:
    // the evidence must be contiguous.
    uint64_t earliest = odd.rbegin()->first + 1;
    bool window = true;
    bool compared = false;
    for (auto it = odd.rbegin(); it != odd.rend(); ++it) {
        const uint64_t j = it->first;
        if (j + 1 != earliest || (k < 0 && j <= m)) break;  // a hole in its own window
        const OpSig* o = at(others, j + k);
        if (!o) {
            if (compared) break;  // a hole in the others' window
            earliest = j;         // past the end of the others' (it is ahead): nothing to compare yet
            continue;
        }
        compared = true;
        if (key_of(*o) != key_of(*it->second)) {
            window = false;
            break;
        }
        earliest = j;
    }
    // Skip: s >= earliest. Extra: s + m >= earliest. And s <= hi.
    const uint64_t first = k > 0 ? earliest : (earliest > m ? earliest - m : 1);
    if (first > hi) return f;
    const uint64_t from = hi + m;  // certainly shifted from here on, whichever s it was
    size_t aligned = 0;
    uint64_t to = 0;
    for (auto it = odd.lower_bound(from); it != odd.end(); ++it)
        if (at(others, it->first + k)) ++aligned, to = it->first;
    if (aligned < kMinDriftAligned) return f;
    f.ok = true;
    f.d.shift = k;
    f.d.first_seq = std::max<uint64_t>(first, std::max(odd.begin()->first, others.begin()->first));
    f.d.from_window = (window || f.d.first_seq > first) && f.d.first_seq > 1;
    f.d.last_seq = hi;
    f.d.odd_from = from;
    f.d.odd_to = to;
    f.d.aligned = aligned;
    f.d.explained = differs;
    f.d.last_differ = last_differ;
    for (int i = 0; i < (k > 0 ? k : -k); ++i) {
        const OpSig* s = k > 0 ? at(others, hi + uint64_t(i)) : at(odd, hi + uint64_t(i));
        if (s) f.d.ops.push_back(*s);
    }
    return f;
}

// "AllReduce" / "AllReduce, Broadcast"
std::string op_names(const std::vector<OpSig>& ops) {
    std::string out;
    for (const auto& s : ops) out += (out.empty() ? "" : ", ") + std::string(disk::op_name(s.op));
    return out;
}

}  // namespace

std::optional<Drift> align_streams(const std::vector<OpSig>& odd_sigs, const std::vector<OpSig>& other_sigs) {
    const Stream odd = stream_of(odd_sigs), others = stream_of(other_sigs);
    if (odd.empty() || others.empty()) return std::nullopt;
    // Where they differ one for one: the differences a drift must explain.
    size_t differs = 0;
    uint64_t hi = 0, last_differ = 0;
    for (const auto& [seq, s] : odd)
        if (const OpSig* o = at(others, seq); o && key_of(*o) != key_of(*s)) {
            if (!hi) hi = seq;
            last_differ = seq;
            ++differs;
        }
    // One difference alone is a mismatch as likely as a drift (an op of another shape in place of one): a shift must
    // explain at least two, and exactly one shift may fit; ties (a periodic stream fits several) claim nothing.
    if (differs < kMinDriftDiffers) return std::nullopt;
    std::optional<Drift> found;
    for (int k = -kMaxDriftShift; k <= kMaxDriftShift; ++k) {
        if (k == 0) continue;
        Fit f = try_shift(odd, others, k, hi, differs, last_differ);
        if (!f.ok) continue;
        if (found) return std::nullopt;
        found = std::move(f.d);
    }
    return found;
}

bool drift_decidable(const CommView& view, uint64_t seq) {
    if (view.ranks.size() < 3) return true;  // no majority of two others to align against (find_drifts)
    const uint64_t needed = seq + uint64_t(kMaxDriftShift) + kMinDriftAligned;
    return std::all_of(view.ranks.begin(), view.ranks.end(), [&](const RankCommState& r) {
        return r.comm_rank < 0 || !r.alive || r.issued >= needed;  // a rank gone or unseen issues no more
    });
}

std::vector<Drift> find_drifts(const CommView& view) {
    const auto order = by_comm_rank(view);
    std::vector<Stream> streams;
    for (size_t i : order) streams.push_back(stream_of(view.ranks[i].recent.view()));
    // Per seq: each signature key and the ranks (positions in `order`) that issued it.
    std::map<uint64_t, std::vector<std::pair<Key, std::vector<size_t>>>> by_seq;
    for (size_t p = 0; p < streams.size(); ++p)
        for (const auto& [seq, s] : streams[p]) {
            auto& groups = by_seq[seq];
            const Key k = key_of(*s);
            auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == k; });
            if (it == groups.end())
                groups.push_back({k, {p}});
            else
                it->second.push_back(p);
        }
    // The ranks outvoted at some seq are the candidates; each one's "others" stream is the majority among the other
    // ranks (at least two of them, more than half of those that show the seq).
    std::vector<bool> odd(streams.size(), false);
    for (const auto& [seq, groups] : by_seq) {
        if (groups.size() < 2) continue;
        size_t best = 0;
        for (const auto& g : groups) best = std::max(best, g.second.size());
        for (const auto& g : groups)
            if (g.second.size() < best)
                for (size_t p : g.second) odd[p] = true;
    }
    std::vector<Drift> out;
    for (size_t p = 0; p < streams.size(); ++p) {
        if (!odd[p]) continue;
        std::vector<OpSig> majority;
        for (const auto& [seq, groups] : by_seq) {
            size_t n = 0;
            const std::pair<Key, std::vector<size_t>>* top = nullptr;
            size_t top_n = 0;
            for (const auto& g : groups) {
                const size_t c = g.second.size() - size_t(std::count(g.second.begin(), g.second.end(), p));
                n += c;
                if (c > top_n) top = &g, top_n = c;
            }
            if (!top || top_n < 2 || 2 * top_n <= n) continue;
            for (size_t q : top->second)
                if (q != p) {
                    majority.push_back(*at(streams[q], seq));
                    break;
                }
        }
        std::vector<OpSig> own;
        for (const auto& [seq, s] : streams[p]) own.push_back(*s);
        if (auto d = align_streams(own, majority)) {
            d->rank = view.ranks[order[p]].comm_rank;
            out.push_back(std::move(*d));
        }
    }
    return out;
}

namespace {

// One hypothesis of drift_alternative: k = 1, `odd` skipped the others' op p; k = -1, its op p is one it added. The
// window of p, from the last seq before `seq` where the ranks were proven one for one (there the shifted pairing
// differs) or from the first both show (then at_or_before).
struct Alternative {
    bool fits = false;
    uint64_t first = 0, last = 0;
    bool at_or_before = false;
};

Alternative fit_alternative(const Stream& odd, const Stream& others, uint64_t seq, int k) {
    Alternative a;
    uint64_t proven = 0, lowest = seq;
    for (uint64_t j = seq - 1; j >= 1; --j) {
        const OpSig *x = at(odd, j), *y = at(others, j);
        if (!x || !y) break;                     // the start of what both show, or a hole
        if (key_of(*x) != key_of(*y)) return a;  // an earlier difference: not one drift at `seq`
        const OpSig* shifted = at(others, uint64_t(int64_t(j) + k));
        if (shifted && key_of(*shifted) != key_of(*x)) {  // still one for one here
            proven = j;
            break;
        }
        lowest = j;
    }
    if (lowest >= seq) return a;  // no same-shaped op before `seq`
    const OpSig* own = at(odd, seq);
    if (k > 0) {
        // Its op at `seq` would be the others' next one: only if they issue that shape at all.
        const bool theirs = std::any_of(others.begin(), others.end(), [&](const auto& e) {
            return e.first < seq && key_of(*e.second) == key_of(*own);
        });
        if (!theirs) return a;
        a.first = proven ? proven + 1 : lowest;
        a.last = seq;
    } else {
        // Its op at `seq` is the others' previous one.
        const OpSig* prev = at(others, seq - 1);
        if (!prev || key_of(*prev) != key_of(*own)) return a;
        a.first = proven ? proven : lowest;
        a.last = seq - 1;
    }
    a.at_or_before = !proven;
    a.fits = a.first < a.last;
    return a;
}

}  // namespace

std::string drift_alternative(const RankCommState& odd, const RankCommState& other, uint64_t seq) {
    const Stream o = stream_of(odd.recent.view()), t = stream_of(other.recent.view());
    const OpSig *own = at(o, seq), *theirs = at(t, seq);
    if (seq < 2 || !own || !theirs || key_of(*own) == key_of(*theirs)) return "";
    const Alternative skip = fit_alternative(o, t, seq, 1), extra = fit_alternative(o, t, seq, -1);
    if (skip.fits == extra.fits) return "";
    const Alternative& a = skip.fits ? skip : extra;
    const std::string where = a.at_or_before ? fmt::format(
                                                   "at or before #{} (the signatures before #{} are not all "
                                                   "visible here)",
                                                   a.last, a.first)
                                             : fmt::format("between #{} and #{}", a.first, a.last);
    if (skip.fits)
        return fmt::format(
            "rank {} may instead have skipped one {} {}: NCCL paired its same-shaped ops after it with the others' "
            "next ones silently, and its {} #{} would be the op the others issue next, not issued yet",
            odd.comm_rank, disk::op_name(theirs->op), where, disk::op_name(own->op), seq);
    return fmt::format(
        "rank {} may instead have added one {} {}: NCCL paired its same-shaped ops after it with the others' previous "
        "ones silently, and its {} #{} is the others' #{}",
        odd.comm_rank, disk::op_name(at(o, seq - 1)->op), where, disk::op_name(own->op), seq, seq - 1);
}

std::string pace_shift(const CommView& view, const RankCommState& odd, uint64_t seq, bool added) {
    // Each rank's issue times by seq, on its own clock: only gaps between its own ops are compared, never one rank's
    // time with another's.
    const Stream o = stream_of(odd.recent.view());
    std::vector<Stream> others;
    for (const RankCommState& r : view.ranks)
        if (r.comm_rank != odd.comm_rank && r.issued >= (added ? seq - 1 : seq))
            others.push_back(stream_of(r.recent.view()));
    if (others.empty() || seq < 3) return "";
    struct Gap {
        uint64_t seq;
        double own_s, others_s;
    };
    // The run of one shape that ends at `odd`'s last op before `seq`: a loop's op, which NCCL pairs by order alone.
    const OpSig* loop = at(o, seq - 1);
    if (!loop) return "";
    std::vector<Gap> gaps;
    for (uint64_t j = seq - 1; j >= 2; --j) {
        const OpSig *a = at(o, j), *b = at(o, j - 1);
        if (!a || !b || a->t_issue_ns < b->t_issue_ns || key_of(*b) != key_of(*loop)) break;
        std::vector<double> theirs;
        for (const Stream& t : others) {
            const OpSig *x = at(t, j), *y = at(t, j - 1);
            if (!x || !y || x->t_issue_ns < y->t_issue_ns) continue;
            // Every op the same shape as the others' at the same seq: otherwise a MISMATCH tells more.
            if (key_of(*x) != key_of(*a) || key_of(*y) != key_of(*b)) return "";
            theirs.push_back((x->t_issue_ns - y->t_issue_ns) / 1e9);
        }
        if (theirs.empty()) break;
        gaps.push_back({j, (a->t_issue_ns - b->t_issue_ns) / 1e9, quantile(std::move(theirs), 0.5)});
    }
    if (gaps.size() < 8) return "";
    // One op of the loop's pace missing from `odd`'s stream shows as one gap before its op about a step longer than
    // the others': the place where NCCL began pairing its ops with the others' next ones; one op added, as one gap
    // about a step shorter. It must stand out: at least half the others' typical gap (and 1 ms) off, and twice any
    // other such difference.
    std::vector<double> typical;
    for (const Gap& g : gaps) typical.push_back(g.others_s);
    const double step_s = quantile(std::move(typical), 0.5);
    const auto off = [&](const Gap& g) { return added ? g.others_s - g.own_s : g.own_s - g.others_s; };
    const Gap* best = nullptr;
    double second = 0;
    for (const Gap& g : gaps) {
        if (!best || off(g) > off(*best)) {
            if (best) second = std::max(second, off(*best));
            best = &g;
        } else {
            second = std::max(second, off(g));
        }
    }
    // And be about one step of the loop: a skipped op's step (or its compute, where the loop waits for each op), an
    // added op's gap gone; a pause of many steps is something else.
    const double excess = off(*best);
    if (excess < std::max(0.001, step_s / 2) || excess > 2.5 * step_s || second > excess / 2) return "";
    auto ms_words = [](double s) { return s < 1 ? fmt::format("{:.0f} ms", s * 1e3) : secs(s); };
    const std::string pace = fmt::format(
        "by its own pace it took {} from #{} to #{} where the others took {} (a step is "
        "about {})",
        ms_words(best->own_s), best->seq - 1, best->seq, ms_words(best->others_s), ms_words(step_s));
    if (added)
        return fmt::format(
            "rank {} may instead have added one {} as its #{}: its ops are the same shape as the others', so NCCL "
            "would have paired each later one with the others' previous silently; {}",
            odd.comm_rank, disk::op_name(at(o, best->seq)->op), best->seq, pace);
    return fmt::format(
        "rank {} may instead have skipped one {} between its #{} and #{}: its ops are the same shape as the others', "
        "so NCCL would have paired each later one with the others' next silently; {}",
        odd.comm_rank, disk::op_name(at(o, best->seq)->op), best->seq - 1, best->seq, pace);
}

std::string drift_what(const Drift& d) {
    const size_t n = size_t(d.shift > 0 ? d.shift : -d.shift);
    const std::string what = n == 1 && !d.ops.empty() ? fmt::format("one {}", disk::op_name(d.ops.front().op))
                                                      : fmt::format("{} ops ({})", n, op_names(d.ops));
    const std::string at =
        n == 1 ? fmt::format("#{}", d.last_seq) : fmt::format("#{}..#{}", d.last_seq, d.last_seq + n - 1);
    // Where: exactly, within a run of same-shaped ops, or no earlier than what is visible says.
    if (d.from_window) return fmt::format("{} at or before {}", what, at);
    if (d.first_seq < d.last_seq) return fmt::format("{} between #{} and #{}", what, d.first_seq, d.last_seq + n - 1);
    if (n == 1 && !d.ops.empty()) return fmt::format("{} {}", disk::op_name(d.ops.front().op), at);
    return fmt::format("{} at {}", what, at);
}

std::string drift_pairing(const Drift& d) {
    const int64_t k = d.shift;
    return fmt::format("its #{}..#{} are the others' #{}..#{}, which NCCL paired silently", d.odd_from, d.odd_to,
                       int64_t(d.odd_from) + k, int64_t(d.odd_to) + k);
}

std::string drift_words(const Drift& d) { return drift_what(d) + ": " + drift_pairing(d); }

namespace {

// The drift's verdict while nothing waits: NOT_JOINED for a skip, EXTRA_OP for an extra op.
Verdict drift_verdict(const CommView& view, const Drift& d) {
    Verdict v;
    v.kind = d.shift > 0 ? Kind::NotJoined : Kind::ExtraOp;
    v.comm_id = view.comm_id;
    v.seq = d.last_seq;
    v.culprits = {d.rank};
    v.missing = missing_ranks(view);
    if (!d.ops.empty()) v.op = d.ops.front();
    v.drift = d;
    const char* verb = d.shift > 0 ? "skipped" : "added";
    v.summary = fmt::format("comm {}: rank {} {} {}", hex_comm(view.comm_id), d.rank, verb, drift_words(d));
    const size_t n = size_t(d.shift > 0 ? d.shift : -d.shift);
    v.evidence.push_back(fmt::format(
        "rank {}'s collectives #{}..#{} equal the others' #{}..#{} ({} compared, op, dtype, count, redop and root), "
        "shifted by {}; one for one they differ at {} sequence numbers (#{}..#{}): exactly one shift of at most {} "
        "explains every difference",
        d.rank, d.odd_from, d.odd_to, int64_t(d.odd_from) + d.shift, int64_t(d.odd_to) + d.shift, d.aligned, n,
        d.explained, d.last_seq, d.last_differ, kMaxDriftShift));
    if (d.first_seq < d.last_seq)
        v.evidence.push_back(fmt::format(
            "#{}..#{} are same-shaped ops: where in them the rank {} the op cannot be told from the signatures{}",
            d.first_seq, d.last_seq, verb,
            d.from_window ? fmt::format("; the signatures before #{} are not all visible here", d.first_seq)
                          : std::string()));
    else if (d.from_window)
        v.evidence.push_back(fmt::format(
            "the signatures before #{} are not all visible here: the drift may have begun before it", d.first_seq));
    const char* which = d.shift > 0 ? "skipped (as the others issued it)" : "added";
    for (const auto& s : d.ops)
        v.evidence.push_back(d.first_seq < d.last_seq ? fmt::format("the op {}, one of #{}..#{} (all of one shape): {}",
                                                                    which, d.first_seq, s.seq, sig_short(s, false))
                                                      : fmt::format("the op {}: {}", which, describe_op(s)));
    v.evidence.push_back(
        "NCCL pairs collectives by their order on the communicator, not by their shape: after the drift each "
        "same-shaped op completed with another op of the other ranks (silently wrong data), and the first op of "
        "another shape is where the signatures disagree (MISMATCH)");
    if (d.shift > 0)
        v.evidence.push_back(
            "a rank skips collectives when a rank-dependent condition skips a step's backward() or an all_reduce "
            "(`continue`, a NaN check, an empty batch)");
    else
        v.evidence.push_back(
            "a rank adds collectives when its number of gradient-accumulation micro-steps differs, a GradScaler "
            "step is taken by some ranks only, or a code path runs on some ranks only");
    return v;
}

bool is_consequence_of(const Verdict& x, const Verdict& lead) {
    const Drift& d = *lead.drift;
    if (&x == &lead || x.comm_id != lead.comm_id || x.drift || x.seq < d.first_seq) return false;
    const bool only_rank = std::all_of(x.culprits.begin(), x.culprits.end(), [&](int r) { return r == d.rank; });
    switch (x.kind) {
        case Kind::Mismatch: return !x.culprits.empty() && only_rank;
        // The hang at the end of the drift, where no rank is proven to hold it up.
        case Kind::StuckInNccl:
        case Kind::Unknown: return x.missing.empty() && only_rank;
        default: return false;
    }
}

}  // namespace

void fold_drifts(std::vector<Verdict>& verdicts) {
    // A drift alone joins the stall's verdict of the same kind that names its rank alone: one verdict for the event.
    for (size_t i = 0; i < verdicts.size();) {
        const Verdict& d = verdicts[i];
        if (!drift_only(d)) {
            ++i;
            continue;
        }
        auto s = std::find_if(verdicts.begin(), verdicts.end(), [&](const Verdict& x) {
            return !x.drift && x.kind == d.kind && x.comm_id == d.comm_id && x.culprits == d.culprits &&
                   !x.waiting.empty();
        });
        if (s == verdicts.end()) {
            ++i;
            continue;
        }
        s->drift = d.drift;
        // Both say "comm 0x...: " first: once is enough.
        const std::string comm = fmt::format("comm {}: ", hex_comm(s->comm_id));
        s->summary = fmt::format("{}; {}", d.summary,
                                 s->summary.rfind(comm, 0) == 0 ? s->summary.substr(comm.size()) : s->summary);
        std::vector<std::string> ev = d.evidence;
        ev.insert(ev.end(), s->evidence.begin(), s->evidence.end());
        s->evidence = std::move(ev);
        verdicts.erase(verdicts.begin() + std::ptrdiff_t(i));
    }
    for (Verdict& lead : verdicts) {
        if (!lead.drift) continue;
        const std::string words = fmt::format("rank {} {} {}", lead.drift->rank,
                                              lead.drift->shift > 0 ? "skipped" : "added", drift_what(*lead.drift));
        for (Verdict& x : verdicts) {
            if (x.consequence || !is_consequence_of(x, lead)) continue;
            x.consequence = true;
            x.consequence_of = words;
            x.evidence.insert(x.evidence.begin(),
                              fmt::format("a consequence of the drift, not its cause: rank {} {} {}", lead.drift->rank,
                                          lead.drift->shift > 0 ? "skipped" : "added", drift_words(*lead.drift)));
            // The hang the drift ends in (all ranks inside the op where the shapes met, say): the lead says who
            // waits where, as a stall's verdict.
            if (drift_only(lead) && !x.waiting.empty() && x.stalled_for_s > 0) {
                lead.seq = x.seq;
                lead.op = x.op;
                lead.waiting = x.waiting;
                lead.stalled_for_s = x.stalled_for_s;
            }
        }
    }
}

std::vector<Verdict> drift_verdicts(const CommView& view) {
    std::vector<Verdict> out;
    for (const auto& d : find_drifts(view)) out.push_back(drift_verdict(view, d));
    return out;
}

}  // namespace ncw::verdict

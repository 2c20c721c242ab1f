// The verdict engine. Everything here is a pure function of the CommView (and `now`): no I/O, no clocks, no globals,
// so the shim's watchdog, the live collector and the offline analyser reach the same verdict from the same files.
#include "engine/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "ncclwatch/format.h"
#include "read/text.h"

namespace ncw::verdict {

namespace {

using disk::OpType;

// ncclResult_t values (nccl.h, NCCL 2.28.9). Kept here so the verdict engine needs no NCCL header.
constexpr int32_t kNcclInProgress = 7;

using text::nccl_result_name;

// ncclInProgress is what ncclCommGetAsyncError reports for a nonblocking communicator with work in flight: normal.
bool is_async_error(int32_t r) { return r != 0 && r != kNcclInProgress; }

std::string hex_comm(uint64_t id) { return text::hex(id); }
std::string secs(double s) { return fmt::format("{:.1f} s", s); }

double ns_to_s(uint64_t ns) { return double(ns) / 1e9; }
double age_s(uint64_t now_ns, uint64_t t_ns) { return t_ns && now_ns > t_ns ? ns_to_s(now_ns - t_ns) : 0.0; }

std::string join_ranks(const std::vector<int>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(r[i]);
    }
    return out;
}

// "rank 2" / "ranks 0,1,3"
std::string ranks_word(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + join_ranks(r); }

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

Key key_of(const OpSig& s) {
    const auto t = OpType(s.op);
    return Key{s.op, s.dtype, s.count, disk::is_rooted(t) ? s.root : -1, disk::has_redop(t) ? s.redop : 0};
}

// "float32, 1048576 elements, sum, root 0"
std::string sig_body(const OpSig& s) {
    const auto t = OpType(s.op);
    std::string out = fmt::format("{}, {} element{}", disk::dtype_name(s.dtype), s.count, s.count == 1 ? "" : "s");
    if (disk::has_redop(t)) out += fmt::format(", {}", disk::redop_name(s.redop));
    if (disk::is_rooted(t)) out += fmt::format(", root {}", s.root);
    return out;
}

// "AllReduce #42 (float32, 1048576 elements, sum)"; without the seq: "AllReduce (float32, ...)".
std::string sig_short(const OpSig& s, bool with_seq) {
    if (OpType(s.op) == OpType::None) return with_seq ? fmt::format("#{} (signature not recorded)", s.seq) : "an op";
    if (with_seq) return fmt::format("{} #{} ({})", disk::op_name(s.op), s.seq, sig_body(s));
    return fmt::format("{} ({})", disk::op_name(s.op), sig_body(s));
}

const OpSig* find_sig(const RankCommState& r, uint64_t seq) {
    if (seq == 0) return nullptr;
    for (const auto& s : r.recent)
        if (s.seq == seq) return &s;
    return nullptr;
}

// "rank 0 (global 0, host h, pid 123)"
std::string rank_id(const RankCommState& r) {
    return fmt::format("rank {} (global {}, host {}, pid {})", r.comm_rank, r.global_rank,
                       r.host.empty() ? "?" : r.host, r.pid);
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

// An op that carried no GPU events of its own (NCCLWATCH_GPU_SAMPLE=auto) has no "reached" of its own: until it
// completes, whether the rank's GPU got to it is not known. Such a rank counts as inside the op, never as behind.
bool reach_unknown(const RankCommState& r, uint64_t seq) {
    if (!r.gpu_tracking || r.reached >= seq) return false;
    if (const OpSig* s = find_sig(r, seq)) return s->flags & disk::kFlagSampledOut;
    // Out of the window (the host ran far ahead of its GPU): unknown as soon as this rank samples at all.
    return std::any_of(r.recent.begin(), r.recent.end(),
                       [](const OpSig& g) { return g.flags & disk::kFlagSampledOut; });
}

// The rank has issued collectives but its GPU has not reached the oldest incomplete one: it is busy with earlier
// work on its stream, not waiting inside NCCL.
bool gpu_behind(const RankCommState& r) {
    return r.gpu_tracking && r.issued > r.completed && r.reached <= r.completed && !reach_unknown(r, r.completed + 1);
}

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

// One line of state per rank, shared by every stall verdict.
std::string rank_state_line(const RankCommState& r, uint64_t now_ns, uint64_t W) {
    std::string line = rank_id(r) + fmt::format(": issued #{}", r.issued);
    if (r.gpu_tracking)
        line += fmt::format(", reached #{}, completed #{}", r.reached, r.completed);
    else
        line += fmt::format(", completed #{} (no GPU tracking: completed = call returned)", r.completed);
    if (!r.alive) {
        if (r.exited_clean)
            line += ", DEAD: exited cleanly (exit handlers ran)";
        else
            line += fmt::format(", DEAD: gone (killed?), heartbeat {} old", secs(r.heartbeat_age_s));
    } else if (gpu_behind(r)) {
        line += fmt::format(", GPU busy with earlier work before #{}", r.completed + 1);
    } else if (const auto w = wait_seconds(r, now_ns)) {
        if (r.completed + 1 == W)
            line += fmt::format(", waiting {}", secs(*w));
        else
            line += fmt::format(", waiting {} in #{}", secs(*w), r.completed + 1);
    } else if (r.issued <= r.completed) {
        line += ", idle (not inside NCCL)";
        if (r.t_last_issue_ns) line += fmt::format(", last issue {} ago", secs(age_s(now_ns, r.t_last_issue_ns)));
    }
    if (is_async_error(r.async_error))
        line += fmt::format(", async error {} ({})", nccl_result_name(r.async_error), r.async_error);
    return line;
}

// The op at the rank's latest issued seq, described, for "its last op".
std::string last_op(const RankCommState& r) {
    if (r.issued == 0) return "no collective on this communicator";
    if (const OpSig* s = find_sig(r, r.issued)) return sig_short(*s, true);
    return fmt::format("#{} (signature not recorded)", r.issued);
}

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

// The signature of `seq` as most of `ranks` recorded it (tie: lowest rank); falls back to any visible rank's copy.
OpSig majority_sig(const CommView& v, const std::vector<size_t>& order, const std::vector<int>& ranks, uint64_t seq) {
    std::vector<std::pair<int, const OpSig*>> entries;
    const OpSig* any = nullptr;
    for (size_t i : order) {
        const auto& r = v.ranks[i];
        const OpSig* s = find_sig(r, seq);
        if (!s) continue;
        if (!any) any = s;
        if (std::find(ranks.begin(), ranks.end(), r.comm_rank) != ranks.end()) entries.emplace_back(r.comm_rank, s);
    }
    if (!entries.empty()) return *group_by_sig(entries).front().sig;
    if (any) return *any;
    OpSig none;
    none.seq = seq;
    return none;
}

// ---- Telling an extra op from a skipped one when the counts are symmetric (1 vs 1) ----

// Who the signature windows point at when one rank waits in W and the other completed W-1 and issued nothing more.
enum class Lean { Unknown, ExtraOp, Skipped };

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

// ---- Point-to-point ----

const PeerP2p* peer_entry(const RankCommState& r, int peer) {
    for (const auto& e : r.p2p)
        if (e.peer == peer) return &e;
    return nullptr;
}

const RankCommState* state_of_rank(const CommView& v, int comm_rank) {
    for (const auto& r : v.ranks)
        if (r.comm_rank == comm_rank) return &r;
    return nullptr;
}

// What `p` posted toward `r` in direction `recv` (its receives from r) or not (its sends to r). Nothing when p's
// counts are unknown: not read, or its ring wrapped and holds no record of r.
std::optional<std::pair<uint64_t, uint64_t>> posted(const RankCommState& p, int r, bool recv) {
    if (!p.p2p_known) return std::nullopt;
    const PeerP2p* e = peer_entry(p, r);
    if (!e) {
        if (p.p2p_wrapped) return std::nullopt;
        return std::pair<uint64_t, uint64_t>{0, 0};
    }
    return recv ? std::pair{e->recvs_issued, e->recvs_completed} : std::pair{e->sends_issued, e->sends_completed};
}

// Sends whose receive the peer never posted (and the reverse) among ranks that are otherwise at rest: the counts
// differ with nothing in flight on either side. In flight, a difference is normal; diagnose_stall judges those.
std::vector<Verdict> p2p_mismatches(const CommView& view) {
    std::vector<Verdict> out;
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known) continue;
        for (const auto& e : r.p2p) {
            if (e.sends_issued == 0 || e.sends_issued != e.sends_completed) continue;
            const RankCommState* p = state_of_rank(view, e.peer);
            if (!p) continue;
            const auto got = posted(*p, r.comm_rank, true);
            if (!got || got->first >= e.sends_issued || got->first != got->second) continue;
            Verdict v;
            v.kind = Kind::Mismatch;
            v.comm_id = view.comm_id;
            v.seq = got->first + 1;
            v.culprits = {p->comm_rank};
            v.missing = missing_ranks(view);
            v.op.op = uint8_t(OpType::Recv);
            v.op.seq = got->first + 1;
            v.summary = fmt::format(
                "comm {}: p2p: rank {} completed {} send{} to rank {}, but rank {} posted only {} receive{} from rank "
                "{}: unmatched send/recv pair",
                hex_comm(view.comm_id), r.comm_rank, e.sends_issued, e.sends_issued == 1 ? "" : "s", p->comm_rank,
                p->comm_rank, got->first, got->first == 1 ? "" : "s", r.comm_rank);
            v.evidence.push_back(fmt::format("p2p: {}: sends to rank {}: issued {}, completed {}", rank_id(r),
                                             p->comm_rank, e.sends_issued, e.sends_completed));
            v.evidence.push_back(fmt::format("p2p: {}: receives from rank {}: issued {}, completed {}", rank_id(*p),
                                             r.comm_rank, got->first, got->second));
            out.push_back(std::move(v));
        }
    }
    return out;
}

// Only sends/receives are outstanding past the timeout: pair each pending one with what its peer posted.
std::vector<Verdict> diagnose_p2p_stall(const CommView& view, uint64_t now_ns, double timeout_s) {
    struct Pending {
        const RankCommState* r;
        int peer;
        bool recv;
        uint64_t seq;  // the oldest pending one in this direction
        double waited;
    };
    std::vector<Pending> pending;
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known || !r.alive) continue;
        for (const auto& e : r.p2p) {
            if (e.sends_issued > e.sends_completed && e.t_oldest_send_pending_ns &&
                age_s(now_ns, e.t_oldest_send_pending_ns) >= timeout_s)
                pending.push_back(
                    {&r, e.peer, false, e.sends_completed + 1, age_s(now_ns, e.t_oldest_send_pending_ns)});
            if (e.recvs_issued > e.recvs_completed && e.t_oldest_recv_pending_ns &&
                age_s(now_ns, e.t_oldest_recv_pending_ns) >= timeout_s)
                pending.push_back({&r, e.peer, true, e.recvs_completed + 1, age_s(now_ns, e.t_oldest_recv_pending_ns)});
        }
    }
    if (pending.empty()) return {};

    std::vector<int> unmatched, dead, unseen, waiting;
    std::vector<std::string> unmatched_ev, matched_ev;
    std::string what;
    double stalled_for = 0;
    const Pending* first = &pending.front();
    for (const auto& pd : pending) {
        stalled_for = std::max(stalled_for, pd.waited);
        if (pd.waited >= first->waited) first = &pd;
        waiting.push_back(pd.r->comm_rank);
        const char* dir = pd.recv ? "recv" : "send";
        const char* prep = pd.recv ? "from" : "to";
        const std::string head = fmt::format("rank {} waits {} in {} #{} {} rank {}", pd.r->comm_rank, secs(pd.waited),
                                             dir, pd.seq, prep, pd.peer);
        const RankCommState* p = state_of_rank(view, pd.peer);
        if (!p) {
            unseen.push_back(pd.peer);
            matched_ev.push_back(fmt::format("p2p: {}; rank {} is not visible from here", head, pd.peer));
            continue;
        }
        const auto got = posted(*p, pd.r->comm_rank, !pd.recv);
        if (!got) {
            matched_ev.push_back(fmt::format("p2p: {}; rank {}'s counts are unknown", head, pd.peer));
            continue;
        }
        const char* other = pd.recv ? "send" : "receive";
        const char* other_prep = pd.recv ? "to" : "from";
        if (got->first < pd.seq) {
            const bool other_waits = got->first > got->second;  // still inside an earlier one of the pair: in order
            std::string line = fmt::format("{}, but rank {} posted only {} {}{} {} rank {}", head, pd.peer, got->first,
                                           other, got->first == 1 ? "" : "s", other_prep, pd.r->comm_rank);
            if (!p->alive) {
                line += " and is DEAD";
                dead.push_back(pd.peer);
            } else if (!other_waits) {
                line += fmt::format(" and waits in none {} it", other_prep);
            }
            if (!other_waits || !p->alive) {
                unmatched.push_back(pd.peer);
                what += (what.empty() ? "" : "; ") + line;
                unmatched_ev.push_back("p2p: " + line);
            }
        } else {
            matched_ev.push_back(fmt::format("p2p: {}; rank {} posted the matching {} (issued {}, completed {})", head,
                                             pd.peer, other, got->first, got->second));
        }
    }
    auto uniq = [](std::vector<int>& v) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
    };
    uniq(unmatched), uniq(dead), uniq(unseen), uniq(waiting);

    Verdict base;
    base.comm_id = view.comm_id;
    base.seq = first->seq;
    base.op.seq = first->seq;
    base.op.op = uint8_t(first->recv ? OpType::Recv : OpType::Send);
    base.waiting = waiting;
    base.missing = missing_ranks(view);
    base.stalled_for_s = stalled_for;
    std::vector<Verdict> out;
    if (!unmatched.empty()) {
        Verdict v = base;
        v.kind = dead.empty() ? Kind::Mismatch : Kind::Dead;
        v.culprits = unmatched;
        v.summary = fmt::format("comm {}: p2p: {}: unmatched send/recv pair", hex_comm(view.comm_id), what);
        v.evidence = unmatched_ev;
        v.evidence.insert(v.evidence.end(), matched_ev.begin(), matched_ev.end());
        out.push_back(std::move(v));
        return out;
    }
    Verdict v = base;
    v.evidence = matched_ev;
    if (!unseen.empty()) {
        v.kind = Kind::Unknown;
        v.culprits = unseen;
        v.summary = fmt::format("comm {}: p2p: {} wait{} in send/recv for {}; the peer{} {} not visible from here",
                                hex_comm(view.comm_id), ranks_word(waiting), waiting.size() == 1 ? "s" : "",
                                secs(stalled_for), unseen.size() == 1 ? "" : "s", ranks_word(unseen));
    } else {
        v.kind = Kind::StuckInNccl;
        v.summary = fmt::format(
            "comm {}: p2p: {} wait{} in send/recv for {}; every pending op's peer posted its match: stuck inside "
            "NCCL (transport?)",
            hex_comm(view.comm_id), ranks_word(waiting), waiting.size() == 1 ? "s" : "", secs(stalled_for));
    }
    out.push_back(std::move(v));
    return out;
}

// "ranks 0,1 = 4; rank 2 = 8" when the ranks disagree on a value, "" when they agree or none is known.
template <class Get>
std::string disagreement(const CommView& view, Get get) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (size_t i : by_comm_rank(view)) {
        const std::string v = get(view.ranks[i]);
        if (v.empty()) continue;
        auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
        if (it == groups.end())
            groups.push_back({v, {view.ranks[i].comm_rank}});
        else
            it->second.push_back(view.ranks[i].comm_rank);
    }
    if (groups.size() < 2) return "";
    std::string out;
    for (size_t i = 0; i < groups.size(); ++i)
        out += fmt::format("{}{} = {}", i ? "; " : "", ranks_word(groups[i].second), groups[i].first);
    return out;
}

}  // namespace

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::NotJoined: return "NOT_JOINED";
        case Kind::GpuNotReached: return "GPU_NOT_REACHED";
        case Kind::StuckInNccl: return "STUCK_IN_NCCL";
        case Kind::Mismatch: return "MISMATCH";
        case Kind::Dead: return "DEAD";
        case Kind::AsyncError: return "ASYNC_ERROR";
        case Kind::Unknown: return "UNKNOWN";
        case Kind::ExtraOp: return "EXTRA_OP";
        case Kind::InitHang: return "INIT_HANG";
        case Kind::Straggler: return "STRAGGLER";
    }
    return "UNKNOWN";
}

std::string describe_op(const OpSig& op) {
    if (OpType(op.op) == OpType::None) return fmt::format("#{} (signature not recorded)", op.seq);
    return fmt::format("{} #{} ({}, stream 0x{:x}, tid {})", disk::op_name(op.op), op.seq, sig_body(op), op.stream,
                       op.tid);
}

std::vector<Verdict> diagnose_init(const CommView& view, uint64_t now_ns, double timeout_s) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);
    const size_t nranks = view.nranks > 0 ? size_t(view.nranks) : view.ranks.size();
    std::vector<int> entered, finished, failed;
    double oldest = 0;
    bool timed_out = false;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (r.comm_state == uint32_t(disk::CommState::InitFailed)) {
            failed.push_back(r.comm_rank);
        } else if (r.comm_state == uint32_t(disk::CommState::Initializing) && r.t_init_done_ns == 0) {
            entered.push_back(r.comm_rank);
            const double a = age_s(now_ns, r.t_init_start_ns);
            oldest = std::max(oldest, a);
            if (r.t_init_start_ns && a >= timeout_s && r.alive) timed_out = true;
        } else {
            finished.push_back(r.comm_rank);
        }
    }
    if (!timed_out) return {};

    Verdict v;
    v.kind = Kind::InitHang;
    v.comm_id = view.comm_id;
    v.waiting = entered;
    v.missing = missing;
    v.stalled_for_s = oldest;
    // Init returns on no rank until every rank has joined: the ranks that never entered hold it up. When all entered,
    // nobody visible is to blame (bootstrap network, master address).
    v.culprits = missing;
    v.culprits.insert(v.culprits.end(), failed.begin(), failed.end());
    std::sort(v.culprits.begin(), v.culprits.end());

    std::string what = fmt::format("comm {}: communicator init not finished after {}: {} of {} entered it and wait",
                                   hex_comm(view.comm_id), secs(oldest), ranks_word(entered), nranks);
    if (!finished.empty()) what += fmt::format("; {} finished it", ranks_word(finished));
    if (!failed.empty()) what += fmt::format("; {} failed it", ranks_word(failed));
    if (!missing.empty())
        what += fmt::format("; {} never appeared", ranks_word(missing));
    else if (failed.empty())
        what += "; every rank entered (bootstrap network or master address?)";
    v.summary = std::move(what);

    for (size_t i : order) {
        const auto& r = view.ranks[i];
        std::string line = rank_id(r) + fmt::format(": {}", disk::comm_state_name(r.comm_state));
        if (r.t_init_start_ns) line += fmt::format(", entered init {} ago", secs(age_s(now_ns, r.t_init_start_ns)));
        if (r.t_init_done_ns)
            line += fmt::format(", finished after {}",
                                secs(ns_to_s(r.t_init_done_ns - std::min(r.t_init_done_ns, r.t_init_start_ns))));
        if (r.cuda_dev >= 0) line += fmt::format(", GPU {}", r.cuda_dev);
        if (!r.pci_bus_id.empty()) line += fmt::format(" ({})", r.pci_bus_id);
        if (!r.alive) line += r.exited_clean ? ", exited cleanly" : ", DEAD";
        v.evidence.push_back(std::move(line));
    }
    if (!missing.empty())
        v.evidence.push_back(
            fmt::format("{} of {} never appeared: not launched, crashed before init, or given another "
                        "unique id (a different rendezvous)",
                        ranks_word(missing), nranks));

    // The seed checklist: each item either names the disagreement or says it was checked.
    std::vector<std::string> ok;
    if (auto d = disagreement(view,
                              [](const RankCommState& r) {
                                  return r.nranks_declared > 0 ? std::to_string(r.nranks_declared) : std::string();
                              });
        !d.empty())
        v.evidence.push_back("checklist: ranks disagree on the communicator size: " + d);
    else
        ok.push_back("communicator size");
    if (auto d = disagreement(
            view,
            [](const RankCommState& r) { return r.world_size > 0 ? std::to_string(r.world_size) : std::string(); });
        !d.empty())
        v.evidence.push_back("checklist: ranks disagree on WORLD_SIZE: " + d);
    else
        ok.push_back("WORLD_SIZE");
    if (auto d = disagreement(view, [](const RankCommState& r) { return r.master_addr; }); !d.empty())
        v.evidence.push_back("checklist: ranks disagree on the master address: " + d);
    else
        ok.push_back("master address");
    bool gpu_problem = false;
    for (size_t i : order) {
        const auto& a = view.ranks[i];
        if (a.host.empty() || (a.pci_bus_id.empty() && a.cuda_dev < 0)) continue;
        std::vector<int> same{a.comm_rank};
        bool first = true;
        for (size_t j : order) {
            const auto& b = view.ranks[j];
            if (&a == &b || b.host != a.host) continue;
            const bool one_gpu = !a.pci_bus_id.empty() ? b.pci_bus_id == a.pci_bus_id
                                                       : (b.pci_bus_id.empty() && b.cuda_dev == a.cuda_dev);
            if (!one_gpu) continue;
            if (b.comm_rank < a.comm_rank) first = false;
            same.push_back(b.comm_rank);
        }
        if (same.size() < 2 || !first) continue;
        gpu_problem = true;
        std::sort(same.begin(), same.end());
        v.evidence.push_back(fmt::format(
            "checklist: {} on host {} share one GPU ({}): two ranks on one GPU hang NCCL "
            "init (torch.cuda.set_device(local_rank) missing?)",
            ranks_word(same), a.host, a.pci_bus_id.empty() ? fmt::format("device {}", a.cuda_dev) : a.pci_bus_id));
    }
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (r.local_rank < 0 || r.cuda_dev < 0 || r.cuda_dev == r.local_rank) continue;
        gpu_problem = true;
        v.evidence.push_back(
            fmt::format("checklist: {} has LOCAL_RANK={} but uses GPU {}: "
                        "torch.cuda.set_device(local_rank) missing?",
                        rank_id(r), r.local_rank, r.cuda_dev));
    }
    if (!gpu_problem) ok.push_back("one GPU per rank");
    if (!ok.empty()) {
        std::string line = "checklist: agree or fine: ";
        for (size_t i = 0; i < ok.size(); ++i) line += (i ? ", " : "") + ok[i];
        v.evidence.push_back(std::move(line));
    }
    return {std::move(v)};
}

std::vector<Verdict> find_mismatches(const CommView& view) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);

    // seq -> (comm rank, signature), ranks in comm-rank order. Only collectives are matched: p2p ops legitimately
    // differ between peers and lifecycle events take no sequence number.
    std::map<uint64_t, std::vector<std::pair<int, const OpSig*>>> by_seq;
    std::map<int, const RankCommState*> state_of;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        state_of.emplace(r.comm_rank, &r);
        std::vector<uint64_t> seen;  // a rank contributes one signature per seq (the first, should it repeat)
        for (const auto& s : r.recent) {
            if (s.seq == 0 || !disk::is_collective(OpType(s.op))) continue;
            if (std::find(seen.begin(), seen.end(), s.seq) != seen.end()) continue;
            seen.push_back(s.seq);
            by_seq[s.seq].emplace_back(r.comm_rank, &s);
        }
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
    // std::map iterates in seq order; the p2p pairs come after the collectives.
    for (auto& v : p2p_mismatches(view)) out.push_back(std::move(v));
    return out;
}

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

std::vector<Verdict> diagnose_stall_inferred(const CommView& view, uint64_t now_ns, double timeout_s);

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

namespace {

std::vector<Verdict> diagnose_stall_inferred(const CommView& view, uint64_t now_ns, double timeout_s) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);
    // nranks 0 means the size is unknown: the visible ranks are then all we can count.
    const size_t nranks = view.nranks > 0 ? size_t(view.nranks) : view.ranks.size();

    // W: the oldest sequence number that a rank has waited in for at least the timeout.
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
    if (W == 0) {
        // No collective outstanding past the timeout: init may not have finished, or only sends/receives are.
        if (auto init = diagnose_init(view, now_ns, timeout_s); !init.empty()) return init;
        return diagnose_p2p_stall(view, now_ns, timeout_s);
    }

    // Everyone alive and inside W (issued it, its GPU got to it, not completed it) waits in W, timed out or not yet.
    std::vector<int> waiting;
    double stalled_for = 0;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (!r.alive || r.issued < W || r.completed >= W || (r.gpu_tracking && r.reached < W && !reach_unknown(r, W)))
            continue;
        waiting.push_back(r.comm_rank);
        if (const auto w = wait_seconds(r, now_ns)) stalled_for = std::max(stalled_for, *w);
    }
    if (waiting.empty()) stalled_for = busy_for;

    Verdict base;
    base.comm_id = view.comm_id;
    base.seq = W;
    base.waiting = waiting;
    base.missing = missing;
    base.op = majority_sig(view, order, waiting, W);
    base.stalled_for_s = stalled_for;
    for (size_t i : order) base.evidence.push_back(rank_state_line(view.ranks[i], now_ns, W));
    if (!missing.empty())
        base.evidence.push_back(
            fmt::format("{} of {}: not visible from here (no rank file)", ranks_word(missing), nranks));

    const std::string head = fmt::format("comm {}: {} of {} ranks wait in {} for {}", hex_comm(view.comm_id),
                                         waiting.size(), nranks, sig_short(base.op, true), secs(stalled_for));

    auto make = [&](Kind k, std::vector<int> culprits, const std::string& what, std::vector<std::string> first) {
        Verdict v = base;
        v.kind = k;
        v.culprits = std::move(culprits);
        v.summary = head + "; " + what;
        first.insert(first.end(), v.evidence.begin(), v.evidence.end());
        v.evidence = std::move(first);
        return v;
    };

    std::vector<Verdict> out;
    std::vector<std::string> skip_ev;       // 1 vs 1 resolved as "the idle rank skipped W": why
    std::vector<std::string> ambiguous_ev;  // 1 vs 1 not resolved: what was looked at

    // 1. NCCL itself reported an error: reported first, but it does not stop the search for who is behind.
    {
        std::vector<int> culprits;
        std::string what;
        for (size_t i : order) {
            const auto& r = view.ranks[i];
            if (!is_async_error(r.async_error)) continue;
            culprits.push_back(r.comm_rank);
            what += fmt::format("{}{} ({} {})", what.empty() ? "" : ", ", r.comm_rank, nccl_result_name(r.async_error),
                                r.async_error);
        }
        if (!culprits.empty())
            out.push_back(make(Kind::AsyncError, culprits,
                               fmt::format("NCCL reported an asynchronous error on {} {}",
                                           culprits.size() == 1 ? "rank" : "ranks", what),
                               {}));
    }

    // 2. ExtraOp: the ranks waiting in W are fewer than the others, and every other rank completed W-1 and issued
    // nothing more (idle, or exited cleanly). The op counts diverged, and the culprit is the minority that is ahead:
    // naming the majority "behind" would send the user after healthy ranks. Counts decide only when the ranks that
    // cannot be seen could not turn the minority into a majority; 1 vs 1 goes to the signature windows.
    std::vector<int> at_rest;  // visible ranks that completed exactly W-1 and have nothing outstanding
    bool others_at_rest = !waiting.empty();
    size_t exited = 0;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (std::find(waiting.begin(), waiting.end(), r.comm_rank) != waiting.end()) {
            others_at_rest = others_at_rest && r.completed + 1 == W;
            continue;
        }
        const bool rest = r.issued == r.completed && r.completed + 1 == W && (r.alive || r.exited_clean) &&
                          !is_async_error(r.async_error);
        others_at_rest = others_at_rest && rest;
        if (rest) at_rest.push_back(r.comm_rank);
        if (!r.alive) ++exited;
    }
    if (others_at_rest && !at_rest.empty()) {
        std::vector<std::string> tie_ev;
        Lean lean = Lean::Unknown;
        if (waiting.size() + missing.size() < at_rest.size()) {
            lean = Lean::ExtraOp;
        } else if (missing.empty() && waiting.size() == at_rest.size()) {
            const RankCommState* a = nullptr;
            const RankCommState* b = nullptr;
            for (const auto& r : view.ranks) {
                if (r.comm_rank == waiting.front()) a = &r;
                if (r.comm_rank == at_rest.front()) b = &r;
            }
            lean = tie_break(*a, *b, W, tie_ev);
            if (lean == Lean::Unknown) {
                // Nothing tells them apart: NOT_JOINED below names the idle side as before, and says so.
                tie_ev.push_back(fmt::format("{} vs {}: the op counts alone cannot say which side diverged",
                                             waiting.size(), at_rest.size()));
                ambiguous_ev = std::move(tie_ev);
            }
        }
        if (lean == Lean::ExtraOp) {
            std::vector<std::string> ev;
            ev.push_back(fmt::format("{} completed every op {} issued (#{}) and {} nothing outstanding{}",
                                     ranks_word(at_rest), at_rest.size() == 1 ? "it" : "they", W - 1,
                                     at_rest.size() == 1 ? "has" : "have",
                                     exited ? fmt::format("; {} of them exited cleanly", exited) : ""));
            for (int r : waiting)
                for (const auto& s : view.ranks)
                    if (s.comm_rank == r)
                        ev.push_back(fmt::format("{}: the extra op {}", rank_id(s),
                                                 find_sig(s, W) ? describe_op(*find_sig(s, W)) : last_op(s)));
            ev.push_back(
                "the op counts diverged: the ahead rank issued one collective more (a different number of "
                "gradient-accumulation micro-steps, a GradScaler skip or a code path taken by some ranks only)");
            if (exited)
                ev.push_back(
                    "ranks that exit cleanly while another still issues collectives usually ran out of data first "
                    "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
            ev.insert(ev.end(), tie_ev.begin(), tie_ev.end());
            Verdict v = make(Kind::ExtraOp, waiting, "", ev);
            v.summary = fmt::format(
                "comm {}: {} issued {} that no other rank issued ({} rank{} completed #{} and "
                "issued nothing more); {} for {}",
                hex_comm(view.comm_id), ranks_word(waiting), sig_short(base.op, true), at_rest.size(),
                at_rest.size() == 1 ? "" : "s", W - 1, waiting.size() == 1 ? "it waits in it" : "they wait in it",
                secs(stalled_for));
            out.push_back(std::move(v));
            for (auto& m : find_mismatches(view))
                if (m.seq == W) m.waiting = waiting, m.stalled_for_s = stalled_for, out.push_back(std::move(m));
            return out;
        }
        if (lean == Lean::Skipped) {
            // The evidence names the idle side: the NOT_JOINED below carries it first.
            skip_ev = std::move(tie_ev);
        }
    }

    // 3. Dead: a process that is gone before completing W (never issued it, or died inside it).
    // 4. NotJoined: a live process that has not issued W. Both can hold at once; both are reported.
    std::vector<int> dead, behind;
    std::string dead_what;
    std::vector<std::string> dead_ev;
    bool dead_clean = false;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
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
    if (!dead.empty()) {
        if (dead_clean)
            dead_ev.push_back(
                "a rank that exits cleanly while the others still issue collectives usually ran out of data first "
                "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
        out.push_back(make(Kind::Dead, dead, dead_what, dead_ev));
    }

    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (r.alive && r.issued < W) behind.push_back(r.comm_rank);
    }
    if (!behind.empty()) {
        // Ranks in the same position are described together: "ranks 0,1,2 are behind: completed #42, ...".
        // Groups keep comm-rank order: the group of the lowest rank comes first.
        std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::vector<size_t>>> same;  // (completed, issued)
        for (size_t i : order) {
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
        const bool skip_resolved = !skip_ev.empty();  // the windows say the idle side skipped: no "extra" hint
        std::vector<std::string> ev = std::move(skip_ev);
        bool all_idle = true;
        for (const auto& [pos, idx] : same) {
            const auto [completed, issued] = pos;
            std::vector<int> rs;
            double lo = 1e300, hi = 0;
            for (size_t i : idx) {
                rs.push_back(view.ranks[i].comm_rank);
                const double a = age_s(now_ns, view.ranks[i].t_last_issue_ns);
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
        if (!ambiguous_ev.empty()) {
            what += fmt::format("; ambiguous ({} vs {}): {} may instead have issued an extra collective",
                                waiting.size(), behind.size(), ranks_word(waiting));
            ev.insert(ev.end(), ambiguous_ev.begin(), ambiguous_ev.end());
        }
        // A minority waiting on an idle majority: more likely the minority issued one op too many than the
        // majority skipped one (op counts diverged: gradient accumulation, a rank-dependent code path).
        if (all_idle && behind.size() > waiting.size() && !skip_resolved) {
            what += fmt::format("; {} idle outside NCCL: {} may have issued an extra collective",
                                behind.size() == 1 ? "it is" : "they are", ranks_word(waiting));
            ev.push_back(
                fmt::format("{} idle with every issued op completed while {} {} in #{}: the op counts "
                            "diverged (gradient accumulation, GradScaler or a code path taken by some ranks)",
                            ranks_word(behind), ranks_word(waiting), waiting.size() == 1 ? "waits" : "wait", W));
        } else if (all_idle && !skip_resolved) {
            ev.push_back(
                fmt::format("{} idle outside NCCL: busy elsewhere (validation, checkpoint: wait it out) or "
                            "skipped the collective (a `continue` before backward())",
                            ranks_word(behind)));
        }
        out.push_back(make(Kind::NotJoined, behind, what, ev));
    }

    // A disagreement at W among the ranks that issued it (always checked: it explains a hang in any state).
    for (auto& m : find_mismatches(view)) {
        if (m.seq != W) continue;
        m.waiting = waiting;
        m.stalled_for_s = stalled_for;
        out.push_back(std::move(m));
    }

    if (!dead.empty() || !behind.empty()) return out;

    // 5. Every live rank issued W, but some GPU has not got to it yet.
    std::vector<int> not_reached, unknown_reach;
    std::string nr_what;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (!r.alive || !r.gpu_tracking || r.reached >= W || r.completed >= W) continue;
        if (reach_unknown(r, W)) {
            unknown_reach.push_back(r.comm_rank);
            continue;
        }
        not_reached.push_back(r.comm_rank);
        nr_what +=
            fmt::format("{}rank {}'s GPU has not reached #{} (busy with earlier work on its stream): reached #{}",
                        nr_what.empty() ? "" : "; ", r.comm_rank, W, r.reached);
    }
    if (!not_reached.empty()) {
        out.push_back(make(Kind::GpuNotReached, not_reached, nr_what, {}));
        return out;
    }

    // 6. Every visible rank is inside W (or past it) and no one is behind.
    size_t done = 0;
    for (const auto& r : view.ranks)
        if (r.alive && r.completed >= W) ++done;
    if (!missing.empty()) {
        // The visible ranks look fine, so the one holding W up is most likely among those we cannot see.
        out.push_back(make(Kind::Unknown, missing,
                           fmt::format("the {} visible ranks all issued #{} and none is behind; {} not visible from "
                                       "here: the likely culprit{}",
                                       view.ranks.size(), W, ranks_word(missing), missing.size() == 1 ? "" : "s"),
                           {}));
        return out;
    }
    std::string what = done == 0 ? fmt::format("all {} ranks are inside #{}; none completed", nranks, W)
                                 : fmt::format("all {} ranks issued #{}; {} completed it, {} still inside", nranks, W,
                                               done, waiting.size());
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
    out.push_back(make(Kind::StuckInNccl, {}, what, stuck_ev));
    return out;
}

}  // namespace

}  // namespace ncw::verdict

// The job-level pass over the stalled communicators: initiating stall and cascades, from what is proven.
#include "engine/cascade.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "engine/verdict_ranks.h"
#include "read/text.h"  // text::hex

namespace ncw::verdict {

namespace {

bool is_stall(const Verdict& v) {
    if (drift_only(v)) return false;  // a drift found while nothing waits
    switch (v.kind) {
        case Kind::Straggler: return false;
        case Kind::Mismatch:
        case Kind::AsyncError: return v.stalled_for_s > 0;  // also found without a stall
        default: return true;
    }
}

// Stalls whose waits began this close together are taken for simultaneous.
constexpr double kSameMomentS = 1.0;

bool same_process(const RankCommState& a, const RankCommState& b) { return a.host == b.host && a.pid == b.pid; }

const RankCommState* process_in(const CommView& v, const RankCommState& p) {
    for (const auto& r : v.ranks)
        if (same_process(r, p)) return &r;
    return nullptr;
}

// When the process issued `seq` on that communicator, on its own clock (0: not known).
uint64_t issue_time(const RankCommState& r, uint64_t seq) {
    for (const auto& s : r.recent)
        if (s.seq == seq) return s.t_issue_ns;
    return r.issued == seq ? r.t_last_issue_ns : 0;
}

struct Stall {
    const CommView* view = nullptr;
    std::vector<Verdict>* verdicts = nullptr;
    double stalled_for = 0;
    uint64_t seq = 0;
    std::vector<int> held;      // comm ranks waiting in `seq` (inside it as far as proven)
    std::vector<int> culprits;  // comm ranks proven to hold it up (every kind but UNKNOWN names them)
    // The same as sets: a world of 131,072 ranks waits in one stall, and a scan per rank would be O(ranks^2).
    std::unordered_set<int> held_set, culprit_set;
    bool stuck = false;  // STUCK_IN_NCCL: every rank proven inside the op, so none waits on another stall
    int parent = -1;     // the stall this one waits because of
    std::string link;    // the evidence line that links it to its parent
};

// A reason for stall `x` to wait because of stall `a`: a process `x` waits on is held in `a`'s op.
struct Candidate {
    size_t a;
    std::string line;
};

std::string process_name(const RankCommState& r) {
    return fmt::format("rank {} (global {}, host {}, pid {})", r.comm_rank, r.global_rank,
                       r.host.empty() ? "?" : r.host, r.pid);
}

// Whether process `p` of stall `x` (its state there: px) is held in stall `a` (its state there: pa) in a way that
// explains x. One that never issued x's op has been held in a since before x stalled (its CPU then blocks, in the
// call or at the next synchronisation, before it can issue). One that issued x's op issued some of its ops on x that
// have not completed on record after it entered a's op, on its own clock: with run-ahead they wait behind it (the
// stall times would not tell: both began within milliseconds).
std::optional<std::string> held_in(const Stall& x, const RankCommState& px, const Stall& a, const RankCommState& pa) {
    const uint64_t t_a = issue_time(pa, a.seq);
    const std::string where =
        fmt::format("{} is held in comm {} (waiting in #{} there", process_name(pa), text::hex(a.view->comm_id), a.seq);
    if (px.issued < x.seq) {
        if (a.stalled_for > x.stalled_for)
            return fmt::format("cascade: {}, stalled {:.1f} s before this one), so it cannot issue here", where,
                               a.stalled_for - x.stalled_for);
        // Stalls that began within a second of each other: its own issue order decides.
        const uint64_t t_last_here = issue_time(px, px.issued);
        if (a.stalled_for + kSameMomentS > x.stalled_for && t_a && t_last_here && t_a >= t_last_here)
            return fmt::format("cascade: {}, which it entered after its last op here, #{}), so it cannot issue here",
                               where, px.issued);
        return std::nullopt;
    }
    if (px.issued <= px.completed) return std::nullopt;
    if (!t_a) {
        if (a.stalled_for <= x.stalled_for) return std::nullopt;
        return fmt::format(
            "cascade: {}, stalled {:.1f} s before this one); its ops here from #{} on have not "
            "completed on record",
            where, a.stalled_for - x.stalled_for, px.completed + 1);
    }
    if (px.t_last_issue_ns <= t_a) return std::nullopt;
    uint64_t after = px.issued;  // its first op here issued after it entered a's op
    for (const auto& g : px.recent)
        if (g.t_issue_ns > t_a && g.seq < after) after = g.seq;
    return fmt::format("cascade: {}), and it issued its ops here {} after it entered that one", where,
                       after < px.issued ? fmt::format("#{}..#{}", after, px.issued) : fmt::format("#{}", after));
}

// The candidate parents of stall i: for each process it waits on, the other stalls that hold it.
std::vector<Candidate> candidates(const std::vector<Stall>& stalls, size_t i) {
    const Stall& x = stalls[i];
    std::vector<Candidate> out;
    // A proven culprit is what x waits on; without one, any rank waiting in it may be. Not for STUCK_IN_NCCL: every
    // rank is proven inside x's own op there.
    if (x.culprits.empty() && x.stuck) return out;
    for (int cr : x.culprits.empty() ? x.held : x.culprits) {
        const RankCommState* px = state_of_rank(*x.view, cr);
        if (!px || (px->host.empty() && px->pid == 0)) continue;
        for (size_t a = 0; a < stalls.size(); ++a) {
            if (a == i) continue;
            const RankCommState* pa = process_in(*stalls[a].view, *px);
            if (!pa || !stalls[a].held_set.count(pa->comm_rank)) continue;
            if (auto line = held_in(x, *px, stalls[a], *pa)) out.push_back({a, std::move(*line)});
        }
    }
    return out;
}

}  // namespace

void assign_cascade_roles(const std::vector<CommVerdicts>& comms) {
    std::vector<Stall> stalls;
    for (const auto& c : comms) {
        Stall s;
        s.view = c.view;
        s.verdicts = c.verdicts;
        bool any = false;
        for (const auto& v : *c.verdicts) {
            if (!is_stall(v)) continue;
            any = true;
            s.stalled_for = std::max(s.stalled_for, v.stalled_for_s);
            s.seq = v.seq;
            s.stuck |= v.kind == Kind::StuckInNccl;
            for (int r : v.waiting)
                if (s.held_set.insert(r).second) s.held.push_back(r);
            // UNKNOWN's "culprits" are ranks out of sight, if any; ASYNC_ERROR's are ranks whose NCCL reported an
            // error (a peer gone, often), not ranks that hold the op up: a dead rank's stall would otherwise read as
            // a cascade of wherever its erroring peers wait.
            if (v.kind == Kind::Unknown || v.kind == Kind::AsyncError) continue;
            for (int r : v.culprits)
                if (s.culprit_set.insert(r).second) s.culprits.push_back(r);
        }
        if (any) stalls.push_back(std::move(s));
    }
    if (stalls.size() < 2) return;

    std::vector<std::vector<Candidate>> cands(stalls.size());
    for (size_t i = 0; i < stalls.size(); ++i) cands[i] = candidates(stalls, i);
    auto root_of = [&](size_t i) {
        while (stalls[i].parent >= 0) i = size_t(stalls[i].parent);
        return i;
    };
    auto depth = [&](size_t i) {
        int d = 0;
        while (stalls[i].parent >= 0) i = size_t(stalls[i].parent), ++d;
        return d;
    };
    // Parents are settled before their children, so the links form a forest: a stall held by nothing settles as a
    // root; then each stall takes the best settled stall that holds it (one whose chain starts at a proven culprit,
    // at the chain that began first, nearest that start, stalled longest). Stalls that only hold one another (no
    // proven start) are broken at the one stalled longest. The chain that began first, before the nearest: a stall
    // held by several chains (the 2x4 grid's TP[0-3], whose ranks wait in four DP groups, three held by TP[4-7] and
    // one by the same absent rank directly) is a cascade of the first domino, which is the job's lead.
    std::vector<bool> settled(stalls.size(), false);
    for (size_t i = 0; i < stalls.size(); ++i) settled[i] = cands[i].empty();
    // The best settled candidate of stall i, or null.
    auto best_of = [&](size_t i) {
        const Candidate* best = nullptr;
        std::tuple<bool, double, int, double> best_key;
        for (const auto& c : cands[i]) {
            if (!settled[c.a]) continue;
            const Stall& root = stalls[root_of(c.a)];
            const std::tuple<bool, double, int, double> key{!root.culprits.empty(), root.stalled_for, -depth(c.a),
                                                            stalls[c.a].stalled_for};
            if (!best || key > best_key) best = &c, best_key = key;
        }
        return best;
    };
    auto settle = [&](size_t i, const Candidate& c) {
        stalls[i].parent = int(c.a);
        stalls[i].link = c.line;
        settled[i] = true;
    };
    for (;;) {
        // A stall settles once every stall that holds it has: it chooses among all of them.
        bool progress = false;
        for (size_t i = 0; i < stalls.size(); ++i) {
            if (settled[i] ||
                !std::all_of(cands[i].begin(), cands[i].end(), [&](const Candidate& c) { return settled[c.a]; }))
                continue;
            if (const Candidate* best = best_of(i)) settle(i, *best), progress = true;
        }
        if (progress) continue;
        // Stalls that hold one another: one with a settled holder settles with the best of those.
        for (size_t i = 0; i < stalls.size() && !progress; ++i)
            if (!settled[i])
                if (const Candidate* best = best_of(i)) settle(i, *best), progress = true;
        if (progress) continue;
        size_t first = stalls.size();
        for (size_t i = 0; i < stalls.size(); ++i)
            if (!settled[i] && (first == stalls.size() || stalls[i].stalled_for > stalls[first].stalled_for)) first = i;
        if (first == stalls.size()) break;
        settled[first] = true;
    }

    std::vector<std::vector<size_t>> caused(stalls.size());
    for (size_t i = 0; i < stalls.size(); ++i)
        if (stalls[i].parent >= 0) caused[root_of(i)].push_back(i);

    for (size_t i = 0; i < stalls.size(); ++i) {
        Stall& s = stalls[i];
        std::string line;
        Role role = Role::None;
        uint64_t cause = 0;
        if (s.parent >= 0) {
            const Stall& root = stalls[root_of(i)];
            role = Role::Cascade;
            cause = root.view->comm_id;
            line = s.link;
            if (root.view != stalls[size_t(s.parent)].view)
                line += fmt::format("; the chain starts in comm {}", text::hex(root.view->comm_id));
        } else if (!caused[i].empty()) {
            role = Role::Initiating;
            const bool first = std::all_of(caused[i].begin(), caused[i].end(),
                                           [&](size_t k) { return stalls[k].stalled_for <= s.stalled_for; });
            line = first ? fmt::format("initiating: stalled first ({:.1f} s ago); ", s.stalled_for)
                         : fmt::format(
                               "initiating: stalled {:.1f} s ago, and holds the processes the others wait "
                               "on; ",
                               s.stalled_for);
            for (size_t k = 0; k < caused[i].size(); ++k)
                line += fmt::format("{}comm {}", k ? ", " : "", text::hex(stalls[caused[i][k]].view->comm_id));
            line += caused[i].size() == 1 ? " waits because of it" : " wait because of it";
        }
        if (role == Role::None) continue;
        for (auto& v : *s.verdicts) {
            if (!is_stall(v)) continue;
            v.role = role;
            v.caused_by_comm = cause;
            v.evidence.insert(v.evidence.begin(), line);
        }
    }
}

}  // namespace ncw::verdict

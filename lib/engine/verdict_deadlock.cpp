// DEADLOCK: see verdict_deadlock.h.
#include "engine/verdict_deadlock.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"  // disk::op_name
#include "read/text.h"         // text::hex

namespace ncw::verdict {

namespace {

using Process = std::pair<std::string, int64_t>;  // host, pid

struct Node {
    const CommView* view = nullptr;
    std::vector<Verdict>* verdicts = nullptr;
    bool stalled = false;  // a stall verdict past the timeout (NOT_JOINED or EXTRA_OP) stands for it
    uint64_t comm_id = 0;
    uint64_t seq = 0;  // the op the ranks wait in
    OpSig op;
    std::vector<int> waiting;  // comm ranks inside it
    std::string summary;       // the stall's words, or the positions' where none is past the timeout yet
    double stalled_for = 0;
    std::set<Process> inside;       // their processes
    std::vector<int> for_ranks;     // comm ranks that never issued it (alive): those it waits for
    std::vector<Process> culprits;  // their processes
    int next = -1;                  // the stall every one of them waits inside
};

Process process_of(const RankCommState& r) { return {r.host, r.pid}; }

std::string op_words(const Node& n) { return fmt::format("{} #{}", disk::op_name(n.op.op), n.seq); }

std::vector<int> global_of(const CommView& v, const std::vector<int>& comm_ranks) {
    std::vector<int> out;
    for (int cr : comm_ranks) {
        const RankCommState* r = state_of_rank(v, cr);
        out.push_back(r ? r->global_rank : -1);
    }
    return out;
}

// The communicator's wait as its positions tell it: the oldest op some rank is inside, whoever has not issued it.
// From its stall verdict where there is one past the timeout; else from the view (a side of the cycle whose wait has
// not lasted the timeout yet, as the other side's began a moment earlier). False when nobody waits there.
bool wait_of(const CommVerdicts& c, Node& n) {
    const Verdict* stall = nullptr;
    for (const auto& v : *c.verdicts)
        if ((v.kind == Kind::NotJoined || v.kind == Kind::ExtraOp) && !v.suspected && !v.consequence &&
            v.stalled_for_s > 0 && !v.waiting.empty()) {
            stall = &v;
            break;
        }
    n.view = c.view;
    n.verdicts = c.verdicts;
    n.comm_id = c.view->comm_id;
    if (stall) {
        n.stalled = true;
        n.seq = stall->seq, n.op = stall->op, n.waiting = stall->waiting;
        n.summary = stall->summary, n.stalled_for = stall->stalled_for_s;
    } else {
        for (const auto& r : c.view->ranks)
            if (r.alive && r.issued > r.completed && (n.seq == 0 || r.completed + 1 < n.seq)) n.seq = r.completed + 1;
        if (n.seq == 0) return false;
        for (size_t i : by_comm_rank(*c.view)) {
            const auto& r = c.view->ranks[i];
            if (!r.alive || r.issued < n.seq || r.completed >= n.seq) continue;
            n.waiting.push_back(r.comm_rank);
            if (const OpSig* g = find_sig(r, n.seq)) n.op = *g;
        }
        n.summary = fmt::format("comm {}: {} inside {}", hex_comm(n.comm_id), ranks_word(n.waiting), op_words(n));
    }
    bool known = true;
    for (const auto& r : c.view->ranks) {
        if (std::binary_search(n.waiting.begin(), n.waiting.end(), r.comm_rank)) {
            n.inside.insert(process_of(r));
        } else if (r.issued < n.seq) {
            if ((r.host.empty() && r.pid == 0) || !r.alive) known = false;
            n.for_ranks.push_back(r.comm_rank);
            n.culprits.push_back(process_of(r));
        }
    }
    std::sort(n.for_ranks.begin(), n.for_ranks.end());
    return known && !n.waiting.empty() && !n.for_ranks.empty();
}

}  // namespace

void find_deadlocks(const std::vector<CommVerdicts>& comms) {
    // Nothing to do (and no view to walk) unless some communicator has a stall that names who never issued its op.
    if (std::none_of(comms.begin(), comms.end(), [](const CommVerdicts& c) {
            return std::any_of(c.verdicts->begin(), c.verdicts->end(), [](const Verdict& v) {
                return (v.kind == Kind::NotJoined || v.kind == Kind::ExtraOp) && !v.suspected && v.stalled_for_s > 0;
            });
        }))
        return;
    std::vector<Node> nodes;
    bool any_stall = false;
    for (const auto& c : comms) {
        Node n;
        if (!wait_of(c, n)) continue;
        any_stall |= n.stalled;
        nodes.push_back(std::move(n));
    }
    if (!any_stall) return;
    if (nodes.size() < 2) return;
    // Edge x -> y: every rank x waits for is waiting inside y's op.
    for (size_t x = 0; x < nodes.size(); ++x)
        for (size_t y = 0; y < nodes.size() && nodes[x].next < 0; ++y)
            if (y != x && std::all_of(nodes[x].culprits.begin(), nodes[x].culprits.end(),
                                      [&](const Process& p) { return nodes[y].inside.count(p) > 0; }))
                nodes[x].next = int(y);
    std::vector<bool> in_cycle(nodes.size(), false);
    for (size_t start = 0; start < nodes.size(); ++start) {
        // Follow the edges from `start`; a cycle is found when the walk returns to a node it visited.
        std::vector<size_t> path;
        std::vector<int> pos(nodes.size(), -1);
        int cur = int(start);
        while (cur >= 0 && pos[size_t(cur)] < 0 && !in_cycle[size_t(cur)]) {
            pos[size_t(cur)] = int(path.size());
            path.push_back(size_t(cur));
            cur = nodes[size_t(cur)].next;
        }
        if (cur < 0 || in_cycle[size_t(cur)] || pos[size_t(cur)] < 0) continue;
        std::vector<size_t> cycle(path.begin() + pos[size_t(cur)], path.end());
        for (size_t i : cycle) in_cycle[i] = true;
        // A hang: some stall of the cycle has lasted the timeout (the others began with it, from the same moment).
        if (std::none_of(cycle.begin(), cycle.end(), [&](size_t i) { return nodes[i].stalled; })) continue;
        // The verdict goes where the most ranks wait: its culprits are the ranks whose order differs from theirs.
        size_t lead = cycle.front();
        for (size_t i : cycle)
            if (nodes[i].waiting.size() > nodes[lead].waiting.size()) lead = i;
        std::rotate(cycle.begin(), std::find(cycle.begin(), cycle.end(), lead), cycle.end());
        const Node& base = nodes[lead];
        Verdict v;
        v.kind = Kind::Deadlock;
        v.comm_id = base.comm_id;
        v.seq = base.seq;
        v.culprits = base.for_ranks;
        v.waiting = base.waiting;
        v.missing = missing_ranks(*base.view);
        v.op = base.op;
        double longest = 0;
        std::string chain;
        for (size_t k = 0; k < cycle.size(); ++k) {
            const Node& n = nodes[cycle[k]];
            longest = std::max(longest, n.stalled_for);
            Verdict::CycleLink link;
            link.comm_id = n.comm_id;
            link.seq = n.seq;
            link.op = n.op;
            link.waiting = n.waiting;
            link.waiting_global = global_of(*n.view, n.waiting);
            link.for_global = global_of(*n.view, n.for_ranks);
            const Node& to = nodes[size_t(n.next)];
            chain +=
                fmt::format("{}{} wait{} in {} on comm {} for {}, which never issued it and wait{} in {} on comm {}",
                            chain.empty() ? "" : "; ", ranks_word(n.waiting), n.waiting.size() == 1 ? "s" : "",
                            op_words(n), text::hex(n.comm_id), ranks_word(n.for_ranks),
                            n.for_ranks.size() == 1 ? "s" : "", op_words(to), text::hex(to.comm_id));
            v.cycle.push_back(std::move(link));
            v.evidence.push_back(n.summary);
        }
        v.stalled_for_s = longest;
        v.summary = fmt::format(
            "a cycle of {} stalled communicators: {}; each side holds what the other needs: they issued their ops "
            "on these communicators in different orders",
            cycle.size(), chain);
        v.evidence.insert(v.evidence.begin(),
                          fmt::format("proven from positions alone: every rank each stall waits for is itself inside "
                                      "the next stall's op and never issued this one; nothing else can end it"));
        v.evidence.push_back(
            "issue collectives on communicators in one order on every rank (the same sequence of process groups), or "
            "do not block (.item(), synchronize) between them");
        const std::string of = fmt::format("the deadlock between communicators {}", [&] {
            std::string ids;
            for (size_t i : cycle) ids += (ids.empty() ? "" : " and ") + text::hex(nodes[i].comm_id);
            return ids;
        }());
        // The cycle's stalls follow from it; those of the other communicators are cascades of the communicator
        // that holds the DEADLOCK (its Initiating role), so that a report about any of them leads with it.
        for (size_t i : cycle)
            for (auto& x : *nodes[i].verdicts)
                if (x.stalled_for_s > 0 && !x.suspected && x.kind != Kind::Straggler && !x.consequence) {
                    x.consequence = true;
                    x.consequence_of = of;
                    x.role = i == lead ? Role::None : Role::Cascade;
                    x.caused_by_comm = i == lead ? 0 : v.comm_id;
                }
        v.role = Role::Initiating;
        nodes[lead].verdicts->push_back(std::move(v));
        // Pointers into that verdict vector are stale past this push: no node of it is read again (it is in the
        // cycle, and wait_of copied what it needed).
    }
}

}  // namespace ncw::verdict

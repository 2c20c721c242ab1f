// The job-level pass over the stalled communicators: initiating stall and cascades.
#include "engine/cascade.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "read/text.h"  // text::hex

namespace ncw::verdict {

namespace {

using Process = std::pair<std::string, int64_t>;  // host, pid

bool is_stall(const Verdict& v) {
    switch (v.kind) {
        case Kind::Straggler: return false;
        case Kind::Mismatch:
        case Kind::AsyncError: return v.stalled_for_s > 0;  // also found without a stall
        default: return true;
    }
}

struct Stall {
    const CommView* view = nullptr;
    std::vector<Verdict>* verdicts = nullptr;
    double stalled_for = 0;
    uint64_t seq = 0;
    std::set<Process> held;      // processes waiting in this communicator's stalled op
    std::set<Process> culprits;  // processes named as its cause
    int parent = -1;             // the stall this one waits because of
    Process link;                // the process that links it to its parent
};

Process process_of(const CommView& v, int comm_rank) {
    for (const auto& r : v.ranks)
        if (r.comm_rank == comm_rank) return {r.host, r.pid};
    return {"", 0};
}

std::string process_name(const CommView& v, const Process& p) {
    for (const auto& r : v.ranks)
        if (r.host == p.first && r.pid == p.second)
            return fmt::format("rank {} (global {}, host {}, pid {})", r.comm_rank, r.global_rank,
                               r.host.empty() ? "?" : r.host, r.pid);
    return fmt::format("pid {} on {}", p.second, p.first.empty() ? "?" : p.first);
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
            for (int r : v.waiting) s.held.insert(process_of(*c.view, r));
            for (int r : v.culprits) s.culprits.insert(process_of(*c.view, r));
        }
        s.held.erase(Process{"", 0});
        s.culprits.erase(Process{"", 0});
        if (any) stalls.push_back(std::move(s));
    }
    if (stalls.size() < 2) return;

    // A stall waits because of the earliest earlier stall that holds one of its culprits.
    for (size_t b = 0; b < stalls.size(); ++b) {
        for (size_t a = 0; a < stalls.size(); ++a) {
            if (a == b || stalls[a].stalled_for <= stalls[b].stalled_for) continue;
            for (const auto& p : stalls[b].culprits) {
                if (!stalls[a].held.count(p)) continue;
                if (stalls[b].parent < 0 || stalls[a].stalled_for > stalls[size_t(stalls[b].parent)].stalled_for) {
                    stalls[b].parent = int(a);
                    stalls[b].link = p;
                }
                break;
            }
        }
    }
    // Parents always stalled strictly earlier, so the chains end.
    auto root_of = [&](size_t i) {
        while (stalls[i].parent >= 0) i = size_t(stalls[i].parent);
        return i;
    };
    std::vector<std::vector<size_t>> caused(stalls.size());
    for (size_t i = 0; i < stalls.size(); ++i)
        if (stalls[i].parent >= 0) caused[root_of(i)].push_back(i);

    for (size_t i = 0; i < stalls.size(); ++i) {
        Stall& s = stalls[i];
        std::string line;
        Role role = Role::None;
        uint64_t cause = 0;
        if (s.parent >= 0) {
            const Stall& a = stalls[size_t(s.parent)];
            const Stall& root = stalls[root_of(i)];
            role = Role::Cascade;
            cause = root.view->comm_id;
            line = fmt::format(
                "cascade: {} is held in comm {} (waiting in #{} there, stalled {:.1f} s before this one), so it cannot "
                "issue here",
                process_name(*a.view, s.link), text::hex(a.view->comm_id), a.seq, a.stalled_for - s.stalled_for);
            if (root.view != a.view)
                line += fmt::format("; the chain starts in comm {}", text::hex(root.view->comm_id));
        } else if (!caused[i].empty()) {
            role = Role::Initiating;
            line = fmt::format("initiating: stalled first ({:.1f} s ago); ", s.stalled_for);
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

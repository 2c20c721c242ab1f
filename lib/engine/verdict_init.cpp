// Communicator init that does not finish: who entered, who finished, who never appeared, and the seed checklist.
#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

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

std::vector<Verdict> diagnose_init(const CommView& view, uint64_t now_ns, double timeout_s) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);
    const size_t nranks = view.nranks > 0 ? size_t(view.nranks) : view.ranks.size();
    std::vector<int> entered, finished, failed;
    double oldest = 0;
    bool timed_out = false;
    // After the job is gone (no rank alive) an init that never finished is still one: its ranks are judged as they
    // were. An init that failed while ranks never appeared gave up waiting for them: entered, not a culprit.
    const bool any_alive = std::any_of(view.ranks.begin(), view.ranks.end(), [](const auto& r) { return r.alive; });
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        const bool gave_up = r.comm_state == uint32_t(disk::CommState::InitFailed) && !missing.empty();
        if (r.comm_state == uint32_t(disk::CommState::InitFailed) && !gave_up) {
            failed.push_back(r.comm_rank);
        } else if (gave_up || (r.comm_state == uint32_t(disk::CommState::Initializing) && r.t_init_done_ns == 0)) {
            entered.push_back(r.comm_rank);
            const uint64_t until = gave_up && r.t_init_done_ns ? r.t_init_done_ns : now_ns;
            const double a = age_s(until, r.t_init_start_ns);
            oldest = std::max(oldest, a);
            if (r.t_init_start_ns && a >= timeout_s && (r.alive || !any_alive)) timed_out = true;
        } else {
            finished.push_back(r.comm_rank);
        }
    }
    if (!timed_out) return {};
    // Every rank is in (none missing, none failed), the last to enter less than the timeout ago: it was the one that
    // held the init up, and the init goes on now; nothing is proven to hang yet. That last one may have finished
    // already (a rank 25 s late whose init took 3 s, while the others' frames saying they finished are on the way).
    if (missing.empty() && failed.empty() && any_alive) {
        double newest = timeout_s;
        for (size_t i : order) {
            const auto& r = view.ranks[i];
            if (r.t_init_start_ns) newest = std::min(newest, age_s(now_ns, r.t_init_start_ns));
        }
        if (newest < timeout_s) return {};
    }

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

}  // namespace ncw::verdict

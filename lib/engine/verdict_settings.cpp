// SETTING_DIFFERS: see verdict_settings.h.
#include "engine/verdict_settings.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_text.h"

namespace ncw::verdict {

namespace {

bool names_no_rank(Kind k) {
    return k == Kind::StuckInNccl || k == Kind::Unknown || k == Kind::GpuNotReached || k == Kind::AsyncError;
}

}  // namespace

const Verdict* stall_of(const std::vector<Verdict>& vs) {
    const Verdict* best = nullptr;
    for (const auto& v : vs) {
        if (v.kind == Kind::Straggler || v.suspected || drift_only(v) || v.stalled_for_s <= 0) continue;
        if (!best || verdict_importance(v.kind) < verdict_importance(best->kind)) best = &v;
    }
    return best;
}

void lead_with_settings(const std::vector<audit::Finding>& differences, const std::vector<CommVerdicts>& comms) {
    for (const auto& c : comms) {
        const Verdict* stall = stall_of(*c.verdicts);
        if (!stall) continue;
        std::vector<Verdict> lead;
        for (const auto& f : differences) {
            std::vector<int> culprits;  // the minority's comm ranks in this communicator
            for (const auto& r : c.view->ranks)
                if (std::find(f.ranks.begin(), f.ranks.end(), r.global_rank) != f.ranks.end())
                    culprits.push_back(r.comm_rank);
            if (culprits.empty()) continue;
            std::sort(culprits.begin(), culprits.end());
            Verdict v;
            v.kind = Kind::SettingDiffers;
            v.comm_id = stall->comm_id;
            v.seq = stall->seq;
            v.waiting = stall->waiting;
            v.missing = stall->missing;
            v.op = stall->op;
            v.stalled_for_s = stall->stalled_for_s;
            v.culprits = std::move(culprits);
            v.role = stall->role;
            v.caused_by_comm = stall->caused_by_comm;
            v.setting = f.summary;
            v.summary = fmt::format("{} while {} wait{} in #{}: {}", f.summary, ranks_word(stall->waiting),
                                    stall->waiting.size() == 1 ? "s" : "", stall->seq,
                                    f.evidence.empty() ? "" : f.evidence.back());
            v.evidence = f.evidence;
            v.evidence.push_back(fmt::format("the stall as the ranks' positions alone tell it: {}: {}",
                                             kind_name(stall->kind), stall->summary));
            v.evidence.push_back(
                "the difference is proven (each rank's environment as its NCCL read it); that it holds this op up is "
                "the likely cause, not a proven one: set it alike on every rank (or unset it) and run again");
            lead.push_back(std::move(v));
        }
        if (lead.empty()) continue;
        // The stalls that name no rank follow from it; one that names its own culprit keeps the lead.
        for (auto& v : *c.verdicts)
            if (names_no_rank(v.kind) && !v.consequence) {
                v.consequence = true;
                v.consequence_of = lead.front().setting;
            }
        for (auto& v : lead) c.verdicts->push_back(std::move(v));
    }
}

}  // namespace ncw::verdict

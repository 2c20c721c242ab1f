// Early suspicion (see suspicion.h).
#include "engine/suspicion.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/verdict_text.h"

namespace ncw::verdict {

double suspect_after_s(uint64_t gap_p99_ns) {
    if (gap_p99_ns == 0) return 0;
    return std::max(kSuspectFactor * ns_to_s(gap_p99_ns), kSuspectFloorS);
}

double comm_suspect_after_s(const CommView& view) {
    double t = 0;
    for (const auto& r : view.ranks) t = std::max(t, suspect_after_s(r.completion_gap_p99_ns));
    return t;
}

namespace {

// "12.3 ms" / "1.50 s": the baseline is usually far below a second.
std::string gap_words(uint64_t ns) {
    const double s = ns_to_s(ns);
    return s < 1 ? fmt::format("{:.1f} ms", s * 1e3) : fmt::format("{:.2f} s", s);
}

}  // namespace

std::vector<Verdict> diagnose_suspicion(const CommView& view, uint64_t now_ns, double timeout_s) {
    const double after = comm_suspect_after_s(view);
    if (after <= 0 || (timeout_s > 0 && after >= timeout_s)) return {};
    std::vector<Verdict> out = diagnose_stall(view, now_ns, after);
    out.erase(std::remove_if(out.begin(), out.end(), [](const Verdict& v) { return v.kind == Kind::InitHang; }),
              out.end());
    uint64_t p99 = 0;
    for (const auto& r : view.ranks) p99 = std::max(p99, r.completion_gap_p99_ns);
    for (auto& v : out) {
        v.suspected = true;
        v.evidence.insert(
            v.evidence.begin(),
            fmt::format("suspected, not yet a stall: no completion for {}, past max({:g} x the usual gap between "
                        "completions (p99 {}), {}) = {}{}",
                        secs(v.stalled_for_s), kSuspectFactor, gap_words(p99), secs(kSuspectFloorS), secs(after),
                        timeout_s > 0 ? fmt::format("; a stall at the timeout ({}) unless it moves", secs(timeout_s))
                                      : std::string()));
    }
    return out;
}

std::vector<Verdict> diagnose_init_suspicion(const CommView& view, uint64_t now_ns, double timeout_s) {
    if (timeout_s > 0 && kInitSuspectS >= timeout_s) return {};
    // Only where every rank of the job is on one host (and so in view): a rank on another node is never seen by a
    // shim, and a job of many nodes may take longer than this to bootstrap.
    const bool one_host = !view.ranks.empty() && std::all_of(view.ranks.begin(), view.ranks.end(), [](const auto& r) {
        return r.world_size > 0 && r.local_world_size == r.world_size;
    });
    if (!one_host) return {};
    uint64_t first = 0, last = 0;
    for (const auto& r : view.ranks)
        if (r.t_init_start_ns) {
            first = first ? std::min(first, r.t_init_start_ns) : r.t_init_start_ns;
            last = std::max(last, r.t_init_start_ns);
        }
    if (!last || now_ns < last || double(now_ns - last) / 1e9 < std::max(kInitSuspectS, double(last - first) / 1e9))
        return {};
    std::vector<Verdict> out = diagnose_init(view, now_ns, kInitSuspectS);
    out.erase(std::remove_if(out.begin(), out.end(), [](const Verdict& v) { return v.missing.empty(); }), out.end());
    for (auto& v : out) {
        v.suspected = true;
        v.evidence.insert(v.evidence.begin(),
                          fmt::format("suspected, not yet an init hang: init waiting {} (past {}) for {} never seen{}",
                                      secs(v.stalled_for_s), secs(kInitSuspectS), ranks_word(v.missing),
                                      timeout_s > 0 ? fmt::format("; an INIT_HANG at the timeout ({}) unless it "
                                                                  "finishes",
                                                                  secs(timeout_s))
                                                    : std::string()));
    }
    return out;
}

}  // namespace ncw::verdict

// Stragglers from the arrival-time skew per sequence number, and which way a communicator is judged. Pure: the caller
// has put the ranks on one clock (or passes each rank's offset) and states how good that clock is.
#include "engine/straggler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/straggler_detail.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using detail::ms;
using detail::quantile;

std::vector<Verdict> find_stragglers(const CommView& view, const StragglerOptions& opt) {
    const size_t n = view.ranks.size();
    if (n < 2) return {};
    // The GPU's own times inside each collective, where NCCL's profiler gave them.
    if (std::any_of(view.ranks.begin(), view.ranks.end(), [](const RankCommState& r) { return !r.gpu_spans.empty(); }))
        return find_gpu_stragglers(view, opt);
    // Issue times are arrivals only when a call returns once its op is done (no GPU tracking: the test NCCL, or a
    // host-synchronous framework). With CUDA, a rank's CPU enqueues ahead of its GPU, and measured on two H200s one
    // rank of a clean DDP job issued every collective a full step (27.6 ms) after the other: issue skew is not
    // lateness there, so no verdict is drawn from it.
    if (std::any_of(view.ranks.begin(), view.ranks.end(),
                    [](const RankCommState& r) { return r.gpu_tracking || r.gpu_source != 0; }))
        return {};

    // seq -> arrival per view rank (0 = not recorded), on the common clock.
    std::map<uint64_t, std::vector<int64_t>> arrival;
    for (size_t i = 0; i < n; ++i) {
        const auto& r = view.ranks[i];
        for (const auto& s : r.recent) {
            if (!s.seq || !s.t_issue_ns || !disk::is_collective(disk::OpType(s.op))) continue;
            auto& row = arrival[s.seq];
            if (row.empty()) row.assign(n, 0);
            if (!row[i]) row[i] = int64_t(s.t_issue_ns) + r.clock_offset_ns;
        }
    }
    std::vector<std::pair<uint64_t, const std::vector<int64_t>*>> common;
    for (const auto& [seq, row] : arrival)
        if (std::all_of(row.begin(), row.end(), [](int64_t t) { return t != 0; })) common.emplace_back(seq, &row);
    if (common.size() < opt.min_common_seqs || common.empty()) return {};

    std::vector<size_t> last_count(n, 0);
    std::vector<std::vector<double>> lateness(n);  // per rank: its arrival minus the latest other rank's, seconds
    for (const auto& [seq, row] : common) {
        size_t top = 0;
        for (size_t i = 1; i < n; ++i)
            if ((*row)[i] > (*row)[top]) top = i;
        int64_t second = INT64_MIN;
        for (size_t i = 0; i < n; ++i)
            if (i != top) second = std::max(second, (*row)[i]);
        ++last_count[top];
        for (size_t i = 0; i < n; ++i)
            lateness[i].push_back(double((*row)[i] - (i == top ? second : (*row)[top])) / 1e9);
    }

    // The step gap: between consecutive common seqs, the median arrival moves on by this much.
    std::vector<double> gaps;
    uint64_t prev_seq = 0;
    double prev = 0;
    for (const auto& [seq, row] : common) {
        std::vector<double> t(row->begin(), row->end());
        const double med = quantile(t, 0.5);
        if (prev_seq && seq == prev_seq + 1 && med >= prev) gaps.push_back((med - prev) / 1e9);
        prev_seq = seq, prev = med;
    }
    const double step_gap = quantile(gaps, 0.5);
    const double threshold = std::max(opt.min_lateness_s, opt.step_gap_fraction * step_gap);

    std::vector<Verdict> out;
    for (size_t i = 0; i < n; ++i) {
        const double share = double(last_count[i]) / double(common.size());
        if (share < opt.min_last_fraction) continue;
        const double median = quantile(lateness[i], 0.5), p90 = quantile(lateness[i], 0.9);
        if (median <= threshold) continue;
        const auto& r = view.ranks[i];
        // The straggler's offset may be off by its uncertainty, and so may the others'.
        bool unknown = r.clock_uncertainty_s < 0;
        double others_u = 0;
        for (size_t j = 0; j < n; ++j) {
            if (j == i) continue;
            if (view.ranks[j].clock_uncertainty_s < 0) unknown = true;
            others_u = std::max(others_u, view.ranks[j].clock_uncertainty_s);
        }
        const double uncertainty = unknown ? -1 : r.clock_uncertainty_s + others_u;
        if (!unknown && median <= uncertainty) continue;

        Verdict v = detail::straggler_at(view, r, common.back().first);
        v.summary = fmt::format(
            "comm 0x{:016x}: rank {} (global {}, host {}) arrived last at {} of {} collectives (#{} .. #{}), a median "
            "{} (p90 {}) after the next-latest rank: a straggler, not a hang",
            view.comm_id, r.comm_rank, r.global_rank, r.host.empty() ? "?" : r.host, last_count[i], common.size(),
            common.front().first, common.back().first, ms(median), ms(p90));
        v.evidence.push_back(
            fmt::format("lateness of rank {} over {} common sequence numbers: median {}, p90 {}; "
                        "last at {:.0f}%",
                        r.comm_rank, common.size(), ms(median), ms(p90), share * 100));
        v.evidence.push_back(
            fmt::format("median gap between consecutive collectives {}; reported above {} "
                        "(the larger of {} and {:.0f}% of the gap)",
                        ms(step_gap), ms(threshold), ms(opt.min_lateness_s), opt.step_gap_fraction * 100));
        std::string clock = view.clock_note.empty() ? "clocks: as recorded" : "clocks: " + view.clock_note;
        clock += unknown ? "; offset uncertainty unknown: lateness below the hosts' clock sync error would not show"
                         : fmt::format("; offset uncertainty {} (lateness above it)", ms(uncertainty));
        v.evidence.push_back(std::move(clock));
        for (size_t j = 0; j < n; ++j)
            if (j != i && last_count[j])
                v.evidence.push_back(
                    fmt::format("rank {}: last at {} of {}", view.ranks[j].comm_rank, last_count[j], common.size()));
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace ncw::verdict

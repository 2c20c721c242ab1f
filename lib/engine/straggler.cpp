// Stragglers (see straggler.h): which way a communicator is judged, then the two rules: from the arrival-time skew
// per sequence number (no GPU tracking), and from each rank's in-collective GPU time (NCCL's profiler). Pure: for the
// arrival times the caller has put the ranks on one clock (or passes each rank's offset) and states how good that
// clock is; the GPU rule compares no clocks.
#include "engine/straggler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

namespace {

std::string ms(double s) { return fmt::format("{:.1f} ms", s * 1e3); }

// A STRAGGLER naming rank r of the communicator at collective `seq` (the newest judged), with that op's signature
// where r's window still holds it; the rule adds the words.
Verdict straggler_at(const CommView& view, const RankCommState& r, uint64_t seq) {
    Verdict v;
    v.kind = Kind::Straggler;
    v.comm_id = view.comm_id;
    v.seq = seq;
    v.culprits = {r.comm_rank};
    for (const auto& s : r.recent)
        if (s.seq == seq) v.op = s;
    return v;
}

// The median of `v` (the mean of the middle two of an even count); 0 for none.
double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

// ---- Sends and receives (a pipeline's stages) ----

std::vector<Verdict> find_p2p_stragglers(const CommView& view, const StragglerOptions& opt) {
    const size_t n = view.ranks.size();
    if (n < 2 || size_t(view.nranks) != n) return {};  // every stage in sight: the one missing may be the slow one
    // held[i]: the peers' median time inside their receives from rank i; own[i]: the longest of its own medians per
    // peer. The longest, not their median: a stage that waits on the slow one passes that wait on to the stages
    // before it, and only its longest own wait cancels it (measured at two nodes, a median put the stage before the
    // slow one at 0.53 of its lateness, and the rule named nobody).
    std::vector<double> held(n, 0), own(n, 0);
    std::vector<bool> known(n, false);
    for (size_t i = 0; i < n; ++i) {
        const RankCommState& r = view.ranks[i];
        if (!r.p2p_known) return {};
        std::vector<double> theirs, mine;
        for (const PeerP2p& e : r.p2p) {
            if (e.recvs_gpu_timed >= opt.p2p_min_timed) mine.push_back(double(e.recvs_gpu_ns) / 1e9);
            const RankCommState* q = state_of_rank(view, e.peer);
            if (!q) continue;
            for (const PeerP2p& back : q->p2p)
                if (back.peer == r.comm_rank && back.recvs_gpu_timed >= opt.p2p_min_timed)
                    theirs.push_back(double(back.recvs_gpu_ns) / 1e9);
        }
        if (theirs.empty()) continue;  // nobody receives from it: it holds nobody up
        known[i] = true;
        held[i] = median_of(theirs);
        own[i] = mine.empty() ? 0 : *std::max_element(mine.begin(), mine.end());
    }
    // The rank that holds its peers up the most beyond what it is held up itself, far ahead of every other.
    size_t top = n;
    for (size_t i = 0; i < n; ++i)
        if (known[i] && (top == n || held[i] - own[i] > held[top] - own[top])) top = i;
    if (top == n) return {};
    const double lateness = held[top] - own[top];
    if (lateness < opt.gpu_min_lateness_s || lateness < opt.p2p_min_share * held[top]) return {};
    for (size_t i = 0; i < n; ++i)
        if (i != top && known[i] && held[i] - own[i] > lateness * opt.p2p_max_next_fraction) return {};
    const RankCommState& r = view.ranks[top];
    Verdict v;
    v.kind = Kind::Straggler;
    v.comm_id = view.comm_id;
    v.culprits = {r.comm_rank};
    v.op.op = uint8_t(disk::OpType::Recv);  // judged from its peers' receives from it
    v.op.root = -1;
    v.summary = fmt::format(
        "comm {}: p2p: its peers wait a median of {:.1f} ms on their GPUs inside each receive from {}, which waits "
        "at most {:.1f} ms inside its own from any one peer: the slowest stage holds the others up by about {:.1f} ms "
        "per exchange (not a hang)",
        hex_comm(view.comm_id), held[top] * 1e3, rank_id(r), own[top] * 1e3, lateness * 1e3);
    for (size_t i = 0; i < n; ++i)
        if (known[i])
            v.evidence.push_back(fmt::format(
                "p2p straggler: {}: its peers inside receives from it {:.2f} ms, it inside receives from its slowest "
                "peer {:.2f} ms (medians of NCCL's profiler times, the newest {} per direction)",
                rank_id(view.ranks[i]), held[i] * 1e3, own[i] * 1e3, kP2pGpuSamples));
    return {v};
}

// ---- From arrival times, and which way a communicator is judged ----

std::vector<Verdict> find_stragglers(const CommView& view, const StragglerOptions& opt,
                                     const std::vector<const CommView*>* job) {
    const size_t n = view.ranks.size();
    if (n < 2) return {};
    // A pipeline's sends and receives, where NCCL's profiler timed them: the stage its peers wait for.
    if (auto p2p = find_p2p_stragglers(view, opt); !p2p.empty()) return p2p;
    // The GPU's own times inside each collective, where NCCL's profiler gave them.
    if (std::any_of(view.ranks.begin(), view.ranks.end(), [](const RankCommState& r) { return !r.gpu_spans.empty(); }))
        return find_gpu_stragglers(view, opt, job);
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

        Verdict v = straggler_at(view, r, common.back().first);
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

// ---- On GPUs ----
//
// From the time each rank's GPU spent inside each collective, as NCCL's profiler reported its start and end
// (RankCommState::gpu_spans). A collective ends on every rank at about the same moment, once the last rank has
// joined, so the rank that arrives last spends the least time inside it, and each other rank spends the difference
// waiting for it. Only durations are compared, each measured on one rank's own
// clock: no clock is compared across ranks or hosts, and no clock offset or its uncertainty enters.
//
// The rule's numbers (StragglerOptions::gpu_*), and why:
//   - the same rank in each of the newest two windows of 12 sequence numbers that every rank has a GPU time for
//     (three of 16 at 2 ranks): a culprit that flips between ranks within a run (measured: FSDP + tensor parallel on
//     a 2x2 mesh, a clean run) is nobody; the live collector keeps the last 64 per rank (read/gpu_spans.h), so a
//     straggler from the first step on is named after 24 steps (48 at 2 ranks), within 50;
//   - shortest at >= 75 % of each window, and that often with a probability of at most 1e-4 by chance alone
//     (binomial, p = 1 / ranks): which rank is shortest at one seq is noise in a clean job, and at 2 ranks a coin
//     flip, so the bound asks for 16 of 16 there (10 of 12 at 4 ranks), and the live collector judges new windows
//     at every analysis;
//   - the lateness counted at a seq is never more than the rank's own: its time outside NCCL before the op (since
//     its previous op on any communicator ended) beyond the others' median. A rank whose op in another communicator
//     ended later (a tensor-parallel op after a data-parallel one) arrives last without being slow itself;
//   - a median lateness of at least 2 ms and 5 % of the step time: real GPU runs jitter by +-15 % per DDP step,
//     and a clean job's ranks still differ by a little every step (which one launches first, CPU scheduling, ranks
//     time-sliced on one GPU); a rank consistently late by less than 5 % of the step costs less than that jitter
//     and is not worth a report, and 2 ms is the floor where steps are short. A rank that waits 20 ms before each
//     step's collective is late by 20 ms at every seq: far above both.
//   - the validation pattern (one rank busy for seconds once, the others waiting) is one seq: never 75 % of them.
// Every rank of the communicator must be visible: among a part of it, the shortest may only be waiting less for a
// rank that is not seen.

namespace {

// P(X >= k) for X ~ Binomial(n, p): how often a rank is shortest k times of n by chance alone.
double binomial_tail(size_t n, size_t k, double p) {
    if (k == 0) return 1;
    if (p >= 1) return 1;
    const double lp = std::log(p), lq = std::log1p(-p);
    double sum = 0;
    for (size_t x = k; x <= n; ++x)
        sum += std::exp(std::lgamma(double(n) + 1) - std::lgamma(double(x) + 1) - std::lgamma(double(n - x) + 1) +
                        double(x) * lp + double(n - x) * lq);
    return std::min(1.0, sum);
}

using Row = std::vector<const GpuSpan*>;  // per view rank, its span at one seq

// A process in ProcessBusy: its rank file, or where there is none (a view built by hand) its host and pid.
std::string busy_key(const RankCommState& r) { return r.file.empty() ? fmt::format("{}:{}", r.host, r.pid) : r.file; }

// The time rank r's GPU spent outside NCCL before the op of span s: from the end of its latest op, on any
// communicator, that ended by the op's start; < 0 unknown (none seen before it).
double time_outside(const ProcessBusy& busy, const RankCommState& r, const GpuSpan& s) {
    const auto it = busy.find(busy_key(r));
    if (it == busy.end() || s.gpu_ns > s.t_end_ns) return -1;
    const uint64_t start = s.t_end_ns - s.gpu_ns;
    const auto& spans = it->second;
    auto after =
        std::upper_bound(spans.begin(), spans.end(), start, [](uint64_t t, const BusySpan& b) { return t < b.end_ns; });
    if (after == spans.begin()) return -1;
    return double(start - std::prev(after)->end_ns) / 1e9;
}

// The median of a row's durations without rank `skip`, seconds, from the row's durations sorted once.
double median_without(const std::vector<uint64_t>& sorted, uint64_t skip_value) {
    // Removing one element equal to skip_value from the sorted list, the median of the n - 1 left (nearest rank,
    // as quantile() takes it) sits at index m of the rest.
    const size_t left = sorted.size() - 1;
    const size_t m = std::min(left - 1, size_t(0.5 * double(left - 1) + 0.5));
    const size_t at = size_t(std::lower_bound(sorted.begin(), sorted.end(), skip_value) - sorted.begin());
    return double(m < at ? sorted[m] : sorted[m + 1]) / 1e9;
}

}  // namespace

ProcessBusy process_busy(const std::vector<const CommView*>& views, const std::vector<RankCommState>* ranks) {
    ProcessBusy out;
    if (ranks)
        for (const auto& r : *ranks) out[busy_key(r)];
    for (const CommView* v : views)
        for (const auto& r : v->ranks) {
            if (r.gpu_spans.empty()) continue;
            auto it = ranks ? out.find(busy_key(r)) : out.try_emplace(busy_key(r)).first;
            if (it == out.end()) continue;
            for (const auto& s : r.gpu_spans)
                if (s.gpu_ns <= s.t_end_ns) it->second.push_back({s.t_end_ns - s.gpu_ns, s.t_end_ns});
        }
    for (auto& [key, spans] : out)
        std::sort(spans.begin(), spans.end(), [](const BusySpan& a, const BusySpan& b) { return a.end_ns < b.end_ns; });
    return out;
}

std::vector<Verdict> find_gpu_stragglers(const CommView& view, const StragglerOptions& opt,
                                         const std::vector<const CommView*>* job) {
    const size_t n = view.ranks.size();
    if (n < 2 || n < size_t(std::max(0, view.nranks))) return {};

    std::map<uint64_t, Row> at;
    for (size_t i = 0; i < n; ++i)
        for (const auto& s : view.ranks[i].gpu_spans) {
            if (!s.seq) continue;
            auto& row = at[s.seq];
            if (row.empty()) row.assign(n, nullptr);
            row[i] = &s;
        }
    std::vector<std::pair<uint64_t, const Row*>> common;
    for (const auto& [seq, row] : at)
        if (std::all_of(row.begin(), row.end(), [](const GpuSpan* s) { return s != nullptr; }))
            common.emplace_back(seq, &row);
    const size_t all = common.size();
    // Judged over the newest `windows` windows of `window` seqs each, and the rank must be the shortest in every one.
    const size_t window = std::max<size_t>(n == 2 ? opt.gpu_window_seqs_two_ranks : opt.gpu_window_seqs, 1);
    const size_t windows = std::max<size_t>(n == 2 ? opt.gpu_windows_two_ranks : opt.gpu_windows, 1);
    if (all < window * windows) return {};
    const size_t total = window * windows, from = all - total;
    const double p = 1.0 / double(n);

    std::vector<size_t> shortest(n, 0);
    std::vector<bool> every_window(n, true);
    for (size_t w = 0; w < windows; ++w) {
        std::vector<size_t> in_window(n, 0);
        for (size_t k = from + w * window; k < from + (w + 1) * window; ++k) {
            const Row& row = *common[k].second;
            size_t best = 0;
            for (size_t i = 1; i < n; ++i)
                if (row[i]->gpu_ns < row[best]->gpu_ns) best = i;
            ++in_window[best];
            ++shortest[best];
        }
        for (size_t i = 0; i < n; ++i)
            if (double(in_window[i]) < opt.gpu_min_shortest_fraction * double(window) ||
                binomial_tail(window, in_window[i], p) > opt.gpu_max_chance)
                every_window[i] = false;
    }

    // The step time: the median, over consecutive common seqs, of the ranks' median gap between their GPU ends (each
    // gap on one rank's clock).
    std::vector<double> gaps, per_rank;
    for (size_t k = 1; k < all; ++k) {
        if (common[k].first != common[k - 1].first + 1) continue;
        per_rank.clear();
        for (size_t i = 0; i < n; ++i) {
            const uint64_t a = (*common[k - 1].second)[i]->t_end_ns, b = (*common[k].second)[i]->t_end_ns;
            if (b > a) per_rank.push_back(double(b - a) / 1e9);
        }
        if (!per_rank.empty()) gaps.push_back(quantile(per_rank, 0.5));
    }
    const double step = quantile(gaps, 0.5);
    if (step <= 0) return {};
    const double threshold = std::max(opt.gpu_min_lateness_s, opt.gpu_step_fraction * step);

    if (std::none_of(every_window.begin(), every_window.end(), [](bool b) { return b; })) return {};
    // Only now, for a candidate: what each of these processes' GPUs did on every communicator.
    const ProcessBusy busy_map = process_busy(job ? *job : std::vector<const CommView*>{&view}, &view.ranks);
    const ProcessBusy* busy = &busy_map;

    std::vector<Verdict> out;
    for (size_t i = 0; i < n; ++i) {
        if (!every_window[i]) continue;
        const double share = double(shortest[i]) / double(total);
        const double chance = binomial_tail(total, shortest[i], p);
        std::vector<double> late, mine, theirs, outside, outside_others;
        std::vector<uint64_t> sorted;
        size_t explained = 0;
        for (size_t k = from; k < all; ++k) {
            const Row& row = *common[k].second;
            sorted.clear();
            for (const GpuSpan* s : row) sorted.push_back(s->gpu_ns);
            std::sort(sorted.begin(), sorted.end());
            const double own = double(row[i]->gpu_ns) / 1e9;
            const double others = median_without(sorted, row[i]->gpu_ns);
            double lateness = others - own;
            // No more than its own doing: its time outside NCCL before the op beyond the others' median.
            std::vector<double> out_others;
            const double out_own = time_outside(*busy, view.ranks[i], *row[i]);
            for (size_t j = 0; j < n && out_own >= 0; ++j)
                if (j != i) {
                    const double o = time_outside(*busy, view.ranks[j], *row[j]);
                    if (o < 0) break;
                    out_others.push_back(o);
                }
            if (out_own >= 0 && out_others.size() == n - 1) {
                const double others_out = quantile(out_others, 0.5);
                outside.push_back(out_own);
                outside_others.push_back(others_out);
                const double own_doing = std::max(0.0, out_own - others_out);
                // Counted where it took off more than the jitter of a clean op (1 ms or a tenth).
                if (lateness - own_doing > std::max(0.001, 0.1 * lateness)) ++explained;
                lateness = std::min(lateness, own_doing);
            }
            late.push_back(lateness);
            mine.push_back(own);
            theirs.push_back(others);
        }
        const double median = quantile(late, 0.5), p90 = quantile(late, 0.9);
        if (median < threshold) continue;
        const double lost = median / step;

        const auto& r = view.ranks[i];
        Verdict v = straggler_at(view, r, common.back().first);
        v.summary = fmt::format(
            "comm 0x{:016x}: rank {} (global {}, host {}) spent the least time inside {} of {} collectives (#{} .. "
            "#{}) on its GPU: it arrives a median {} (p90 {}) after the others, who wait that long inside each one: "
            "{:.0f}% of the step time ({}, the median gap between collectives) lost to it; a straggler, not a hang",
            view.comm_id, r.comm_rank, r.global_rank, r.host.empty() ? "?" : r.host, shortest[i], total,
            common[from].first, common.back().first, ms(median), ms(p90), lost * 100, ms(step));
        v.evidence.push_back(fmt::format(
            "in-collective GPU time (NCCL's profiler: each rank's GPU start and end of the op, each on its own clock; "
            "no clocks compared across ranks): rank {} median {}, the other ranks median {}",
            r.comm_rank, ms(quantile(mine, 0.5)), ms(quantile(theirs, 0.5))));
        v.evidence.push_back(
            fmt::format("lateness of rank {} (the other ranks' median in-collective time minus its own) over {} common "
                        "sequence numbers: median {}, p90 {}; shortest at {:.0f}% of them (by chance alone, with {} "
                        "ranks: p = {:.1e}), and at least {:.0f}% in each of {} windows of {}",
                        r.comm_rank, total, ms(median), ms(p90), share * 100, n, chance,
                        opt.gpu_min_shortest_fraction * 100, windows, window));
        if (!outside.empty())
            v.evidence.push_back(fmt::format(
                "its GPU's time outside NCCL before each op (since its previous op on any communicator ended): median "
                "{}, the other ranks' {}: the lateness counted is never more than the difference{}",
                ms(quantile(outside, 0.5)), ms(quantile(outside_others, 0.5)),
                explained ? fmt::format(" (less at {} of {} ops: a wait in another communicator, not its own doing)",
                                        explained, late.size())
                          : std::string()));
        v.evidence.push_back(fmt::format(
            "median gap between consecutive collectives' GPU ends {}; reported at {} or more (the larger of {} and "
            "{:.0f}% of the gap)",
            ms(step), ms(threshold), ms(opt.gpu_min_lateness_s), opt.gpu_step_fraction * 100));
        for (size_t j = 0; j < n; ++j)
            if (j != i && shortest[j])
                v.evidence.push_back(
                    fmt::format("rank {}: shortest at {} of {}", view.ranks[j].comm_rank, shortest[j], total));
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace ncw::verdict

// Prometheus text rendering for the live collector.
#include "report/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace ncw::metrics {

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlong forms, surrogates and code
// points past U+10FFFF are invalid too): a scraper rejects the whole response over one bad label value.
size_t utf8_sequence(const std::string& s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c < 0x80) return 1;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((b(i + k) & 0xC0) != 0x80) return 0;
    if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogate
    if (n == 4 && c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (n == 4 && c == 0xF4 && b(i + 1) >= 0x90) return 0;  // past U+10FFFF
    return n;
}

}  // namespace

std::string escape_label(const std::string& v) {
    std::string out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size();) {
        const char c = v[i];
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else if (const size_t n = utf8_sequence(v, i); n > 0) {
            out.append(v, i, n);
            i += n;
            continue;
        } else
            out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER, one per invalid byte
        ++i;
    }
    return out;
}

namespace {

std::string labels(const RankCommSample& s) {
    return fmt::format(R"(job="{}",rank="{}",host="{}",pid="{}",comm="0x{:016x}",comm_rank="{}")", escape_label(s.job),
                       s.global_rank, escape_label(s.host), s.pid, s.comm_id, s.comm_rank);
}

void family(std::string& out, const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string render(const std::vector<RankCommSample>& samples, const CollectorTotals& t, size_t max_bytes) {
    // The collector's totals are small and always there: rendered last, with room kept for them.
    constexpr size_t kTotalsRoom = 4096;
    const size_t budget = max_bytes == 0 ? SIZE_MAX : max_bytes > kTotalsRoom ? max_bytes - kTotalsRoom : 0;
    std::string out;
    out.reserve(std::min(budget, 256 + samples.size() * 8 * 160));
    // Under the cap, the ranks a verdict names come first (the series someone is looking for in a hang).
    std::vector<size_t> order(samples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t i) { return samples[i].culprit || samples[i].stalled || samples[i].suspected; });
    std::vector<std::string> lbl;
    lbl.reserve(samples.size());
    for (const auto& s : samples) lbl.push_back(labels(s));
    uint64_t dropped = 0;
    bool full = false;

    struct Gauge {
        const char* name;
        const char* help;
        double (*get)(const RankCommSample&);
        bool (*has)(const RankCommSample&);
    };
    static const Gauge gauges[] = {
        {"ncclwatch_coll_issued", "Last collective sequence number the rank issued on the communicator.",
         [](const RankCommSample& s) { return double(s.issued); }, nullptr},
        {"ncclwatch_coll_reached", "Last collective sequence number the rank's GPU reached.",
         [](const RankCommSample& s) { return double(s.reached); }, nullptr},
        {"ncclwatch_coll_completed", "Last collective sequence number that completed on the rank.",
         [](const RankCommSample& s) { return double(s.completed); }, nullptr},
        {"ncclwatch_seconds_since_progress", "Seconds since the rank last completed an operation on the communicator.",
         [](const RankCommSample& s) { return s.since_progress_s; },
         [](const RankCommSample& s) { return s.since_progress_s >= 0; }},
        {"ncclwatch_stalled", "1 while a verdict names the rank (culprit or waiting) or its shim flags a stall.",
         [](const RankCommSample& s) { return s.stalled ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_culprit", "1 while a verdict names the rank as the cause of a stall.",
         [](const RankCommSample& s) { return s.culprit ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_comm_suspected",
         "1 while the communicator's wait is suspected: no completion past max(20 x its p99 gap between completions, "
         "5 s), short of the stall timeout.",
         [](const RankCommSample& s) { return s.suspected ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_completion_gap_p99_seconds",
         "The rank's running baseline: p99 of the gaps between completions while the communicator is busy.",
         [](const RankCommSample& s) { return s.gap_p99_s; }, [](const RankCommSample& s) { return s.gap_p99_s >= 0; }},
        {"ncclwatch_connected", "1 while the rank's connection to the collector is open.",
         [](const RankCommSample& s) { return s.connected ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_alive", "0 once the rank counts as gone (connection lost past the grace, or exited).",
         [](const RankCommSample& s) { return s.alive ? 1.0 : 0.0; }, nullptr},
    };
    fmt::memory_buffer line;
    for (const auto& g : gauges) {
        size_t family_at = out.size();
        bool any = false;
        if (!full) family(out, g.name, "gauge", g.help);
        for (size_t i : order) {
            if (g.has && !g.has(samples[i])) continue;
            if (full) {
                ++dropped;
                continue;
            }
            line.clear();
            fmt::format_to(std::back_inserter(line), "{}{{{}}} {}\n", g.name, lbl[i], g.get(samples[i]));
            if (out.size() + line.size() > budget) {
                full = true;
                ++dropped;
                continue;
            }
            out.append(line.data(), line.size());
            any = true;
        }
        if (full && !any && out.size() > family_at) out.resize(family_at);  // no family header without a sample
    }

    family(out, "ncclwatch_collector_connections", "gauge", "Open rank connections.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_connections {}\n", t.connections);
    family(out, "ncclwatch_collector_ranks", "gauge", "Distinct ranks (job, global rank) seen.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_ranks {}\n", t.ranks_known);
    family(out, "ncclwatch_collector_jobs", "gauge", "Jobs seen.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_jobs {}\n", t.jobs);
    family(out, "ncclwatch_collector_frames_total", "counter", "Frames received from ranks.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_frames_total {}\n", t.frames);
    family(out, "ncclwatch_collector_bad_frames_total", "counter",
           "Connections closed for a malformed or refused frame.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_bad_frames_total {}\n", t.bad_frames);
    family(out, "ncclwatch_collector_reports_total", "counter", "Verdict reports written.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_reports_total {}\n", t.reports);
    family(out, "ncclwatch_collector_analyses_total", "counter", "Analyses run.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_analyses_total {}\n", t.analyses);
    family(out, "ncclwatch_collector_last_analysis_seconds", "gauge", "Duration of the latest analysis.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_last_analysis_seconds {}\n", t.last_analysis_s);
    family(out, "ncclwatch_collector_jobs_evicted_total", "counter",
           "Jobs forgotten: every rank said Bye, silent past the retention, or evicted for room.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_jobs_evicted_total {}\n", t.evicted_jobs);
    family(out, "ncclwatch_collector_metrics_series_dropped", "gauge",
           "Series left out of this response by its size cap (serve --metrics-max-bytes).");
    fmt::format_to(std::back_inserter(out), "ncclwatch_collector_metrics_series_dropped {}\n", dropped);
    return out;
}

}  // namespace ncw::metrics

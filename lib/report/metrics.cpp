// Prometheus and OpenMetrics text rendering for the live collector (metrics.h).
#include "report/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
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

const char* content_type(Format f) {
    return f == Format::OpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    : "text/plain; version=0.0.4; charset=utf-8";
}

std::string dcgm_pci_bus_id(const std::string& cuda) {
    // [domain:]bus:device.function, all hex: NVML writes the domain in 8 digits, and every digit upper case.
    const size_t c2 = cuda.rfind(':');
    if (c2 == std::string::npos || c2 == 0) return cuda;
    const size_t c1 = cuda.rfind(':', c2 - 1);
    const std::string domain = c1 == std::string::npos ? std::string() : cuda.substr(0, c1);
    const std::string rest = cuda.substr(c1 == std::string::npos ? 0 : c1 + 1);
    if (domain.size() > 8) return cuda;
    for (char ch : domain + rest)
        if (!std::isxdigit(static_cast<unsigned char>(ch)) && ch != ':' && ch != '.') return cuda;
    std::string out = std::string(8 - domain.size(), '0') + domain + ":" + rest;
    for (char& ch : out) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    return out;
}

namespace {

// The labels of one rank's series: stable across restarts of the job (no pid), and dcgm-exporter's names for the
// host and the GPU (Hostname, pci_bus_id, UUID). job_id, not job: Prometheus's own `job` target label would rename it.
std::string labels(const RankCommSample& s) {
    std::string out = fmt::format(R"(job_id="{}",rank="{}",Hostname="{}",comm="0x{:016x}",comm_rank="{}")",
                                  escape_label(s.job), s.global_rank, escape_label(s.host), s.comm_id, s.comm_rank);
    if (!s.pci_bus_id.empty())
        fmt::format_to(std::back_inserter(out), R"(,pci_bus_id="{}")", escape_label(dcgm_pci_bus_id(s.pci_bus_id)));
    if (!s.gpu_uuid.empty()) fmt::format_to(std::back_inserter(out), R"(,UUID="{}")", escape_label(s.gpu_uuid));
    return out;
}

enum class Type { Gauge, Counter, Info };

// A family's name as its samples carry it: a counter's samples end in _total, an info's in _info. `base` is the
// name without either.
std::string sample_name(const char* base, Type type) {
    return std::string(base) + (type == Type::Counter ? "_total" : type == Type::Info ? "_info" : "");
}

// HELP and TYPE: OpenMetrics names the family (a counter without _total, an info without _info, typed `info`);
// Prometheus text names the samples, and has no info type (a gauge of 1).
void family(std::string& out, Format f, const char* base, Type type, const char* help) {
    const bool om = f == Format::OpenMetrics;
    const std::string name = om ? std::string(base) : sample_name(base, type);
    const char* t = type == Type::Counter ? "counter" : type == Type::Info && om ? "info" : "gauge";
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, t);
}

void total(std::string& out, Format f, const char* base, Type type, const char* help, double v) {
    family(out, f, base, type, help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", sample_name(base, type), v);
}

}  // namespace

std::string render(const std::vector<RankCommSample>& samples, const std::vector<VerdictSample>& verdicts,
                   const std::vector<CulpritSample>& culprits, const CollectorTotals& t, const BuildInfo& build,
                   Format format, size_t max_bytes) {
    // The collector's totals are small and always there: rendered last, with room kept for them.
    constexpr size_t kTotalsRoom = 4096;
    const size_t budget = max_bytes == 0 ? SIZE_MAX : max_bytes > kTotalsRoom ? max_bytes - kTotalsRoom : 0;
    std::string out;
    out.reserve(std::min(budget, 512 + samples.size() * 13 * 200));
    family(out, format, "ncclwatch_build", Type::Info, "The ncclwatch version and the git commit it was built from.");
    fmt::format_to(std::back_inserter(out), "ncclwatch_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
                   escape_label(build.version), escape_label(build.revision));

    uint64_t dropped = 0;
    bool full = false;
    fmt::memory_buffer line;
    // One sample line, or counted as dropped once the budget is spent.
    auto put = [&](bool& any) {
        if (full || out.size() + line.size() > budget) {
            full = true;
            ++dropped;
            return;
        }
        out.append(line.data(), line.size());
        any = true;
    };
    auto open_family = [&](const char* base, Type type, const char* help) {
        const size_t at = out.size();
        if (!full) family(out, format, base, type, help);
        return at;
    };
    auto close_family = [&](size_t family_at, bool any) {
        if (!any && out.size() > family_at) out.resize(family_at);  // no family header without a sample
    };

    // The current verdicts first: a few lines, and the ones an alert looks for.
    {
        size_t at = open_family("ncclwatch_verdict", Type::Gauge,
                                "1 while the job's latest analysis holds a verdict of this kind on the communicator.");
        bool any = false;
        for (const auto& v : verdicts) {
            line.clear();
            fmt::format_to(std::back_inserter(line),
                           "ncclwatch_verdict{{job_id=\"{}\",comm=\"0x{:016x}\",kind=\"{}\"}} 1\n", escape_label(v.job),
                           v.comm_id, escape_label(v.kind));
            put(any);
        }
        close_family(at, any);
    }

    // Who holds each communicator up: what a stall's alert names (one line per communicator).
    {
        size_t at = open_family("ncclwatch_stall_culprit", Type::Info,
                                "The culprits of the communicator's lead verdict: their global ranks, hosts and the op "
                                "they hold up.");
        bool any = false;
        for (const auto& c : culprits) {
            line.clear();
            fmt::format_to(std::back_inserter(line),
                           "ncclwatch_stall_culprit_info{{job_id=\"{}\",comm=\"0x{:016x}\",kind=\"{}\","
                           "culprit_rank=\"{}\",culprit_host=\"{}\",op=\"{}\"}} 1\n",
                           escape_label(c.job), c.comm_id, escape_label(c.kind), escape_label(c.ranks),
                           escape_label(c.hosts), escape_label(c.op));
            put(any);
        }
        close_family(at, any);
    }

    // Under the cap, the ranks a verdict names come first (the series someone is looking for in a hang).
    std::vector<size_t> order(samples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t i) { return samples[i].culprit || samples[i].stalled || samples[i].suspected; });
    std::vector<std::string> lbl;
    lbl.reserve(samples.size());
    for (const auto& s : samples) lbl.push_back(labels(s));

    struct PerRank {
        const char* base;
        Type type;
        const char* help;
        double (*get)(const RankCommSample&);
        bool (*has)(const RankCommSample&);
    };
    static const PerRank per_rank[] = {
        {"ncclwatch_coll_issued", Type::Counter,
         "Collectives the rank issued on the communicator (the last collective sequence number).",
         [](const RankCommSample& s) { return double(s.issued); }, nullptr},
        {"ncclwatch_coll_reached", Type::Counter, "Collectives the rank's GPU reached (the last sequence number).",
         [](const RankCommSample& s) { return double(s.reached); }, nullptr},
        {"ncclwatch_coll_completed", Type::Counter,
         "Collectives that completed on the rank (the last sequence number).",
         [](const RankCommSample& s) { return double(s.completed); }, nullptr},
        {"ncclwatch_ops_issued", Type::Counter,
         "NCCL operations (collectives and point-to-point) the rank issued on the communicator.",
         [](const RankCommSample& s) { return double(s.ops_issued); }, nullptr},
        {"ncclwatch_ops_completed", Type::Counter, "NCCL operations that completed on the rank, of those issued.",
         [](const RankCommSample& s) { return double(s.ops_completed); }, nullptr},
        {"ncclwatch_last_progress_timestamp_seconds", Type::Gauge,
         "Unix time at which the rank last completed an operation on the communicator.",
         [](const RankCommSample& s) { return s.last_progress_unix_s; },
         [](const RankCommSample& s) { return s.last_progress_unix_s >= 0; }},
        {"ncclwatch_stalled", Type::Gauge,
         "1 while a verdict names the rank (culprit or waiting) or its shim flags a stall.",
         [](const RankCommSample& s) { return s.stalled ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_culprit", Type::Gauge, "1 while a verdict names the rank as the cause of a stall.",
         [](const RankCommSample& s) { return s.culprit ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_comm_suspected", Type::Gauge,
         "1 while the communicator's wait is suspected: no completion past max(20 x its p99 gap between completions, "
         "5 s), short of the stall timeout.",
         [](const RankCommSample& s) { return s.suspected ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_completion_gap_p99_seconds", Type::Gauge,
         "The rank's running baseline: p99 of the gaps between completions while the communicator is busy.",
         [](const RankCommSample& s) { return s.gap_p99_s; }, [](const RankCommSample& s) { return s.gap_p99_s >= 0; }},
        {"ncclwatch_connected", Type::Gauge, "1 while the rank's connection to the collector is open.",
         [](const RankCommSample& s) { return s.connected ? 1.0 : 0.0; }, nullptr},
        {"ncclwatch_alive", Type::Gauge, "0 once the rank counts as gone (connection lost past the grace, or exited).",
         [](const RankCommSample& s) { return s.alive ? 1.0 : 0.0; }, nullptr},
    };
    for (const auto& g : per_rank) {
        size_t at = open_family(g.base, g.type, g.help);
        bool any = false;
        const std::string name = sample_name(g.base, g.type);
        for (size_t i : order) {
            if (g.has && !g.has(samples[i])) continue;
            line.clear();
            fmt::format_to(std::back_inserter(line), "{}{{{}}} {}\n", name, lbl[i], g.get(samples[i]));
            put(any);
        }
        close_family(at, any);
    }

    const Format f = format;
    total(out, f, "ncclwatch_collector_connections", Type::Gauge,
          "Open rank connections (a relay's and each rank on it count one each).", double(t.connections));
    total(out, f, "ncclwatch_collector_ranks", Type::Gauge, "Distinct ranks (job, global rank) seen.",
          double(t.ranks_known));
    total(out, f, "ncclwatch_collector_jobs", Type::Gauge, "Jobs seen.", double(t.jobs));
    total(out, f, "ncclwatch_collector_frames", Type::Counter, "Frames received from ranks.", double(t.frames));
    total(out, f, "ncclwatch_collector_bad_frames", Type::Counter,
          "Connections closed for a malformed or refused frame.", double(t.bad_frames));
    total(out, f, "ncclwatch_collector_reports", Type::Counter, "Verdict reports written.", double(t.reports));
    total(out, f, "ncclwatch_collector_analyses", Type::Counter, "Analyses run.", double(t.analyses));
    total(out, f, "ncclwatch_collector_last_analysis_seconds", Type::Gauge, "Duration of the latest analysis.",
          t.last_analysis_s);
    total(out, f, "ncclwatch_collector_jobs_evicted", Type::Counter,
          "Jobs forgotten: every rank said Bye, silent past the retention, or evicted for room.",
          double(t.evicted_jobs));
    total(out, f, "ncclwatch_collector_metrics_series_dropped", Type::Gauge,
          "Series left out of this response by its size cap (serve --metrics-max-bytes).", double(dropped));
    if (format == Format::OpenMetrics) out += "# EOF\n";
    return out;
}

}  // namespace ncw::metrics

// The live collector's state as Prometheus text (exposition format 0.0.4) or OpenMetrics 1.0.0 text, whichever the
// scraper asked for (lib/live/http_request.h reads its Accept header): one sample set per rank and communicator, the
// current verdicts and their culprits per communicator, the build, and the collector's totals. Pure rendering: the
// server fills the samples.
//
// Conventions (docs/monitoring/README.md): monotonic counts are counters named *_total; times are Unix timestamps
// (*_timestamp_seconds), never ages; labels are stable across restarts (job_id, rank, Hostname, comm, comm_rank, no
// pid), and `Hostname`, `pci_bus_id` and `UUID` are dcgm-exporter's own label names and spelling, so the series
// join its GPU series.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ncw::metrics {

enum class Format {
    Prometheus,   // text/plain; version=0.0.4
    OpenMetrics,  // application/openmetrics-text; version=1.0.0: counter families without _total, "# EOF" last
};

// The Content-Type header of a response in `f`.
const char* content_type(Format f);

// One rank's view of one communicator, as the latest digest said it, on the collector's clock.
struct RankCommSample {
    std::string job;
    int global_rank = -1;
    std::string host;
    uint64_t comm_id = 0;
    int comm_rank = -1;
    std::string pci_bus_id;      // as CUDA spells it ("0000:0d:00.0"); written in dcgm-exporter's form; "" = left out
    std::string gpu_uuid;        // "GPU-..." as dcgm-exporter's UUID label writes it; "" = left out
    uint64_t ops_issued = 0;     // every NCCL operation (collectives, p2p) the rank issued on the communicator
    uint64_t ops_completed = 0;  // and of those, completed
    uint64_t issued = 0;         // collective sequence numbers: issued, reached by the GPU, completed
    uint64_t reached = 0;
    uint64_t completed = 0;
    double last_progress_unix_s = -1;  // when an operation last completed, Unix time; < 0: none yet (left out)
    bool stalled = false;    // a current verdict names this rank (culprit or waiting), or its shim flags a stall
    bool culprit = false;    // a current verdict names this rank as the cause
    bool suspected = false;  // the communicator's wait is suspected (engine/suspicion.h), not yet a stall
    double gap_p99_s = -1;   // the rank's baseline of the gaps between completions; < 0: none yet (left out)
    bool connected = false;
    bool alive = true;
};

// One verdict of the latest analysis of a job: its kind (include/ncclwatch/verdict_kinds.h's name) on a
// communicator.
struct VerdictSample {
    std::string job;
    uint64_t comm_id = 0;
    std::string kind;  // "MISMATCH", "DEAD", ...
};

// Who holds up a communicator, where, and in which op: the culprits of its lead verdict (report/headline.h
// culprit_labels), for an alert to name them (docs/monitoring/alerts.yml joins it on job_id and comm). One per
// communicator whose verdict names culprits: ncclwatch_stall_culprit_info, value 1, its label values bounded in
// length (at most 8 ranks and 4 hosts are listed).
struct CulpritSample {
    std::string job;
    uint64_t comm_id = 0;
    std::string kind;   // the verdict's kind ("NOT_JOINED")
    std::string ranks;  // the culprits' global ranks ("2", "2,5-7"; "comm 3" where a global rank is not known)
    std::string hosts;  // their hosts ("node-b", "node-b,node-c")
    std::string op;     // the op held up ("AllReduce #6")
};

struct CollectorTotals {
    uint64_t connections = 0;
    uint64_t ranks_known = 0;
    uint64_t jobs = 0;
    uint64_t frames = 0;
    uint64_t bad_frames = 0;
    uint64_t reports = 0;
    uint64_t analyses = 0;
    double last_analysis_s = 0;  // duration of the latest analysis
    uint64_t evicted_jobs = 0;
};

// What ncclwatch_build_info says: include/ncclwatch/version.h's kVersion and kGitHash.
struct BuildInfo {
    std::string version;
    std::string revision;
};

// "a\"b" -> a\"b with backslash, quote and newline escaped, as label values require.
std::string escape_label(const std::string& v);

// CUDA's "0000:0d:00.0" as dcgm-exporter (NVML) spells it: "00000000:0D:00.0" (an 8-digit domain, upper case).
// Anything else is returned as it is.
std::string dcgm_pci_bus_id(const std::string& cuda);

// The whole /metrics body. With max_bytes (0 = no cap) it stays under that many bytes: the per-rank series are
// written in the order of the families, the ranks a verdict names first, until the cap; what is left out is counted
// in ncclwatch_collector_metrics_series_dropped.
std::string render(const std::vector<RankCommSample>& samples, const std::vector<VerdictSample>& verdicts,
                   const std::vector<CulpritSample>& culprits, const CollectorTotals& totals, const BuildInfo& build,
                   Format format = Format::Prometheus, size_t max_bytes = 0);

}  // namespace ncw::metrics

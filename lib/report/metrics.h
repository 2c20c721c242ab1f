// Prometheus text exposition (format 0.0.4, which OpenMetrics scrapers also accept) of the live collector's state:
// one sample set per rank and communicator, plus the collector's totals. Pure rendering: the server fills the samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ncw::metrics {

// One rank's view of one communicator, as the latest digest said it, on the collector's clock.
struct RankCommSample {
    std::string job;
    int global_rank = -1;
    std::string host;
    int64_t pid = 0;
    uint64_t comm_id = 0;
    int comm_rank = -1;
    uint64_t issued = 0;
    uint64_t reached = 0;
    uint64_t completed = 0;
    double since_progress_s = -1;  // < 0: no progress recorded yet (the sample is left out)
    bool stalled = false;          // a current verdict names this rank (culprit or waiting), or its shim flags a stall
    bool culprit = false;          // a current verdict names this rank as the cause
    bool suspected = false;        // the communicator's wait is suspected (engine/suspicion.h), not yet a stall
    double gap_p99_s = -1;         // the rank's baseline of the gaps between completions; < 0: none yet (left out)
    bool connected = false;
    bool alive = true;
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

// "a\"b" -> a\"b with backslash, quote and newline escaped, as label values require.
std::string escape_label(const std::string& v);

// The whole /metrics body. With max_bytes (0 = no cap) it stays under that many bytes: the per-rank series are
// written in the order of the families, the ranks a verdict names first, until the cap; what is left out is counted
// in ncclwatch_collector_metrics_series_dropped.
std::string render(const std::vector<RankCommSample>& samples, const CollectorTotals& totals, size_t max_bytes = 0);

}  // namespace ncw::metrics

// `analyze --trace out.json`: the job on a timeline, in Chrome trace event format (chrome://tracing, Perfetto UI).
// One process per host, one thread (track) per rank; each operation of the rank files' rings is a complete event
// from issue to completion, or to the analysis' "now" when it never completed (marked outstanding); verdicts are
// instant events. Every timestamp goes through its file's wall-clock anchor, so hosts share one time axis (as good as
// their clock synchronisation).
#pragma once

#include <cstddef>
#include <string>

#include "engine/job_view.h"

namespace ncw::report {

struct TraceStats {
    size_t files = 0;   // rank files whose rings were read
    size_t events = 0;  // events written
};

struct TraceOptions {
    // The newest operations kept per rank (0 = the whole ring): a full default ring is 16,384 records per rank,
    // about 4 GB of trace for 1,024 ranks, more than a trace viewer loads. The hang is at the end.
    size_t max_ops_per_rank = 500;
};

// Reads the rings of a.files (the readable ones) and writes the trace to `path` ("-" = stdout). false with *error
// when the file cannot be written; unreadable rank files are skipped (the analysis already names them).
bool write_trace(const Analysis& a, const std::string& path, const TraceOptions& opt, TraceStats* stats,
                 std::string* error);

}  // namespace ncw::report

// The analysis as a person reads it: the text report of `ncclwatch-collector analyze`: the verdict line
// (headline.h), the evidence, the per-communicator tables, then "Also noticed". A pure function of an Analysis: no
// I/O, no clocks, so a report of the same files is the same text. The JSON document is analysis_json.h.
#pragma once

#include <cstddef>
#include <string>

#include "engine/job_view.h"

namespace ncw::report {

struct TextOptions {
    bool color = false;      // ANSI colours (the caller decides: terminal, NO_COLOR, --color)
    bool all_ranks = false;  // one table row per rank even for big communicators
    double timeout_s = 0;    // the stall timeout the analysis used, for the heading
    // The stall timeout the ranks ran with, in words ("60 s"), for the heading; "": not said.
    std::string ranks_timeout;
    // Communicators with more ranks than this print grouped rows (identical progress and state share one row; the
    // culprits keep their own row) unless all_ranks.
    size_t max_rows = 32;
};

// The whole report: verdict line, evidence, per-communicator tables, then "Also noticed".
std::string render_text(const Analysis& a, const TextOptions& opt);

// The Python stacks of a verdict's ranks (format 1.5): culprits first, then the waiting ranks; for each, the thread
// that issued NCCL calls, innermost frame first, the user's frames marked. "" when no rank has stacks. The live
// report shows the same section.
std::string python_section(const CommResult& c, const verdict::Verdict& v, const TextOptions& opt);

}  // namespace ncw::report

// The analysis as a person reads it: the text report of `ncclwatch-collector analyze`: the verdict line
// (headline.h), the evidence, the per-communicator tables, then "Also noticed". A pure function of an Analysis: no
// I/O, no clocks, so a report of the same files is the same text. The JSON document is analysis_json.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "report/story.h"

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
    // What happened before the end and is over (report/story.h): listed, and the first line when nothing is hung.
    const std::vector<StoryEntry>* story = nullptr;
};

// The whole report: verdict line, evidence, "Before the end" (opt.story), per-communicator tables, then "Also noticed".
std::string render_text(const Analysis& a, const TextOptions& opt);

// The Python stacks of a verdict's ranks (format 1.5): culprits first, then the waiting ranks; for each, the thread
// that issued NCCL calls, innermost frame first, the user's frames marked. "" when no rank has stacks. The live
// report shows the same section.
std::string python_section(const CommResult& c, const verdict::Verdict& v, const TextOptions& opt);

// A rank's state in a communicator, in the words of every table of ranks (analyze's text, the live report's): one
// of "exited", "GONE" (with its heartbeat's age where known), the communicator's state where it is not active
// ("initializing", "init failed", "aborted", "revoked", "finalized", "destroyed"), "GPU busy before #N",
// "waiting in #N" or "idle"; then ", async error NAME (N)" and ", no GPU tracking" where they hold. Decided by the
// facts the stall verdicts stand on (engine/verdict_ranks.h; the evidence words the same states,
// verdict::rank_state_line), never by whether the rank's own watchdog has flagged the stall yet: ranks waiting in one
// op read alike. Pure.
std::string rank_state_words(const verdict::RankCommState& r);

// How the live collector put its ranks' clocks on its own, for the live report's clock line.
struct LiveClocks {
    size_t exact = 0;              // ranks on the collector's boot: one clock, offset 0
    size_t estimated = 0;          // ranks whose offset a one-way minimum filter estimated
    size_t window = 0;             // the frames that filter looks back over
    int64_t widest_spread_ns = 0;  // the widest spread of an estimating window
};

struct LiveText {
    std::string text;        // live-report.txt
    std::string first_line;  // the first verdict's line, for the log and the ranks' dump requests ("" for none)
};

// The live collector's report of one job (live-report.txt): a heading with the job and the wall time `real_ns`
// (`again`: the same verdicts, now that the ranks' Python stacks came), the verdict lines (a straggler only when it
// leads), the lead verdict's Python stacks, the clock line, then per communicator a table of its ranks (at most 256
// rows: live-report.json has every rank), whose state column says where each rank is as the stall verdicts see it,
// in rank_state_words' words, as analyze's tables. Pure, as render_text.
LiveText live_report_text(const Analysis& a, const std::string& job_id, uint64_t real_ns, bool again,
                          const LiveClocks& clocks);

}  // namespace ncw::report

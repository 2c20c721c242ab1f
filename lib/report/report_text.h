// The analysis as a person reads it, and as a program reads it: the text report of `ncclwatch-collector analyze`
// (and of the live collector), and the JSON document of schema ncclwatch.analysis/2
// (docs/schemas/analysis.schema.json). Pure functions of an Analysis: no I/O, no clocks, so a report of the same
// files is the same text.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/job_view.h"

namespace ncw::report {

struct TextOptions {
    bool color = false;      // ANSI colours (the caller decides: terminal, NO_COLOR, --color)
    bool all_ranks = false;  // one table row per rank even for big communicators
    double timeout_s = 0;    // the stall timeout the analysis used, for the heading
    // Communicators with more ranks than this print grouped rows (identical progress and state share one row; the
    // culprits keep their own row) unless all_ranks.
    size_t max_rows = 32;
};

// A hang or a mismatch: any verdict but STRAGGLER (slow, not stuck). Decides the exit status and "problem_found".
bool hang_or_mismatch(const Analysis& a);

// The verdict the report leads with: the most important one, an initiating stall before the cascades it causes.
// nullptr fields when there is none.
Analysis::VerdictRef lead_verdict(const Analysis& a);

// The verdict line: the most important finding of the whole analysis in plain words, naming the culprit with where
// it runs (global rank, host, GPU, pid). "no hang and no mismatch: ..." when nothing was found.
std::string headline(const Analysis& a);

// The same line for one verdict of one job.
std::string verdict_headline(const JobResult& job, const CommResult& comm, const verdict::Verdict& v);

// The whole report: verdict line, evidence, per-communicator tables, then "Also noticed".
std::string render_text(const Analysis& a, const TextOptions& opt);

inline constexpr const char* kAnalysisSchema = "ncclwatch.analysis/2";
inline constexpr int kAnalysisSchemaVersion = 2;

// The JSON document (schema ncclwatch.analysis/2).
nlohmann::json analysis_json(const Analysis& a, double timeout_s);

}  // namespace ncw::report

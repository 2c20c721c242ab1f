// The analysis as a program reads it: the JSON document of `ncclwatch-collector analyze --json`, schema
// ncclwatch.analysis/2 (docs/schemas/analysis.schema.json). A pure function of an Analysis, like the text report.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/job_view.h"

namespace ncw::report {

inline constexpr const char* kAnalysisSchema = "ncclwatch.analysis/2";
inline constexpr int kAnalysisSchemaVersion = 2;

// The JSON document (schema ncclwatch.analysis/2).
nlohmann::json analysis_json(const Analysis& a, double timeout_s);

// A job's environment audit findings (engine/env_audit.h), as the analysis and the live report both carry them.
nlohmann::json audit_json(const std::vector<audit::Finding>& findings);

}  // namespace ncw::report

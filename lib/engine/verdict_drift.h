// The drift verdicts (verdict_drift.cpp) for find_mismatches; the drift's own interface (align_streams, find_drifts,
// fold_drifts, its words) is in verdict.h.
#pragma once

#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

// The verdict of each drift of the view (find_drifts) while nothing waits: NOT_JOINED (skipped) or EXTRA_OP (added).
std::vector<Verdict> drift_verdicts(const CommView& view);

}  // namespace ncw::verdict

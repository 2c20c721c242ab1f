// SETTING_DIFFERS: a stall in a job whose ranks disagree on a setting NCCL needs every rank to agree on (the audit's
// list, engine/env_audit.h NCW_MUST_AGREE_SETTINGS). The difference is proven (each rank's environment as its NCCL
// read it); that it caused the stall is not, so it leads only stalls that name no rank of their own (STUCK_IN_NCCL,
// UNKNOWN, GPU_NOT_REACHED, ASYNC_ERROR), which then follow it as its consequences. A stall that names its culprit
// (DEAD, NOT_JOINED, EXTRA_OP, MISMATCH, DEADLOCK) keeps the lead, the difference beside it.
#pragma once

#include <vector>

#include "engine/cascade.h"  // CommVerdicts
#include "engine/env_audit.h"

namespace ncw::verdict {

// The communicator's stall (its most important verdict with ranks waiting past its timeout), or null.
const Verdict* stall_of(const std::vector<Verdict>& vs);

// One SETTING_DIFFERS verdict per stalled communicator with a minority rank of a difference in `differences`
// (audit::must_agree_differences: global ranks), added to its verdicts.
void lead_with_settings(const std::vector<audit::Finding>& differences, const std::vector<CommVerdicts>& comms);

}  // namespace ncw::verdict

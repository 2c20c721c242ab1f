// Telling an extra op from a skipped one when the counts are symmetric, 1 vs 1 (verdict_tie.cpp), for the stall
// verdicts (verdict_stall.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

enum class Lean { Unknown, ExtraOp, Skipped };
// `ahead` waits in W, `idle` completed W-1 and issued nothing more: which of the two diverged, with why in `ev`.
Lean tie_break(const RankCommState& ahead, const RankCommState& idle, uint64_t W, std::vector<std::string>& ev);

}  // namespace ncw::verdict

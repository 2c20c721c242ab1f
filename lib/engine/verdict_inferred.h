// What peers' completions prove (verdict_inferred.cpp): the progress a rank whose counts lag must have made, for the
// stall verdicts (verdict_stall.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

// What peers' completions of all-joined collectives imply for a rank whose counts lag: its new "reached" (joined) and
// "completed" (never past an op of its own proven not completed).
struct Raise {
    size_t index;  // in view.ranks
    uint64_t reached;
    uint64_t completed;
};
// The raises, with one note each for the evidence; none in the common case.
std::vector<Raise> inferred_progress(const CommView& view, std::vector<std::string>& notes);

}  // namespace ncw::verdict

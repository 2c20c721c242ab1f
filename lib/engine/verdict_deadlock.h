// DEADLOCK: stalls on several communicators of one job that wait on each other in a cycle. Ranks 0-2 wait in A's #11
// for rank 3, which never issued it; rank 3 waits in B's #11 for ranks 0-2, which never issued that one: each side
// holds what the other needs, because they issued their ops on A and B in different orders. Proven from positions
// only: every rank a stall waits for is itself waiting inside the next stall of the cycle (no clocks compared).
#pragma once

#include <vector>

#include "engine/cascade.h"  // CommVerdicts

namespace ncw::verdict {

// Adds one DEADLOCK verdict per cycle of stalls (NOT_JOINED, or EXTRA_OP: the ranks that never issued the op are
// held elsewhere) to the communicator where the most ranks wait (its culprits, the ranks that never issued it there,
// are the ranks whose order differs from the majority's), and marks the cycle's stall verdicts its consequences.
// Suspicions take no part.
void find_deadlocks(const std::vector<CommVerdicts>& comms);

}  // namespace ncw::verdict

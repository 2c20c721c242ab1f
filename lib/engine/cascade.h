// Cross-communicator stalls: when several communicators of one job stall, which stalled first (initiating) and which
// wait because of it (cascade). A process held inside a stalled op of communicator A cannot issue in communicator B,
// so if B's culprit is such a process and A stalled earlier, B is a cascade of A.
#pragma once

#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

struct CommVerdicts {
    const CommView* view;
    std::vector<Verdict>* verdicts;  // the communicator's verdicts; roles and one evidence line are added in place
};

// Sets Verdict::role and caused_by_comm (the initiating communicator at the root of the chain) on the stall verdicts
// of the given communicators of one job. Communicators with no stall, or the only stall, are left at Role::None.
void assign_cascade_roles(const std::vector<CommVerdicts>& comms);

}  // namespace ncw::verdict

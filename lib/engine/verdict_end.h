// FAILED: how the job ended, where its end was not a hang of its own. torch's NCCL watchdog ends a process whose
// collective outlived the process group's timeout (SIGABRT raised in its thread, format 1.12 end_thread), even where
// the late rank arrived since: the job died, and "recovered" or a DEAD naming the ranks it ended would mislead. The
// verdict leads the job, naming what the watchdog timed out and who held it (the stall judged at that moment, or the
// op that waited longest on the ranks it ended).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cascade.h"
#include "engine/verdict.h"

namespace ncw::verdict {

// A rank that torch's watchdog ended, as its file said before the causal order put it back (causal.h).
struct WatchdogEnd {
    uint64_t comm_id = 0;
    int comm_rank = -1;
    uint64_t at_ns = 0;  // its end, on the views' clock
    int signal = 0;      // the end's signal (SIGABRT), 0 where the watchdog aborted the communicators first
    std::string thread;  // "pt_nccl_watchdg"
};

// Every (communicator, rank) whose process torch's watchdog ended: taken before order_causally.
std::vector<WatchdogEnd> torch_watchdog_ends(const std::vector<CommView*>& views);

// One FAILED verdict for the job where `ends` is not empty, put first on the communicator of the op it names: the
// stall there at the moment the ranks were ended (its culprits), else the op that had waited longest on them, else
// none (an error torch's own log names). The stall keeps its place after it.
// `ranks_timeout_s`: the shortest NCCLWATCH_TIMEOUT_SEC the ranks ran with (0: not known), set beside the wait;
// `torch_timeout_s`: the shortest timeout of the ranks' torch process groups (0: not known).
void lead_with_torch_watchdog(std::vector<CommVerdicts>& cv, const std::vector<WatchdogEnd>& ends,
                              double ranks_timeout_s = 0, double torch_timeout_s = 0);

}  // namespace ncw::verdict

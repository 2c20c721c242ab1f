// The watchdog thread: heartbeat, stall detection, the verdict over the ranks this node can see, reports, dumps,
// and the continuous cross-rank mismatch check.
#pragma once

#include "shim/record/runtime.h"

namespace ncw {

void start_watchdog(Runtime& rt);
void watchdog_forget_after_fork();
void watchdog_on_exit(Runtime& rt);

}  // namespace ncw

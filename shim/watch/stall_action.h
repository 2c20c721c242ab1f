// What the watchdog does after it reported a stall, as NCCLWATCH_ACTION says (report, abort, kill).
#pragma once

#include "shim/record/runtime.h"

namespace ncw {

// Runs on the watchdog's thread, after the report and the dump: abort revokes the communicator (NCCL 2.28.7+) or
// aborts it, so that the framework raises; kill sends SIGABRT to this process.
void act_on_stall(Runtime& rt, CommRuntime& cr);

}  // namespace ncw

// The one place that starts the shim: at the first communicator init it parses the configuration, creates the rank
// file, builds the runtime's state (shim/record/runtime.h) and starts every thread of ours (the watchdog, the GPU
// completion poller, the environment probe, the live digest client), then installs the process-end paths and the
// fork and exit handlers. Nothing below this room includes it.
#pragma once

#include "shim/record/runtime.h"

namespace ncw {

// Starts the runtime if it is not running yet and the shim is enabled. Called at communicator init. nullptr: the
// shim passes calls through (disabled, or it could not start: said once).
Runtime* start_runtime();

}  // namespace ncw

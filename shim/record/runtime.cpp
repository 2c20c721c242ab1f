#include "shim/record/runtime.h"

namespace ncw {

// Published by the start-up (shim/start/startup.cpp) once the runtime is whole; nullptr again in a forked child.
std::atomic<Runtime*> g_runtime{nullptr};

}  // namespace ncw

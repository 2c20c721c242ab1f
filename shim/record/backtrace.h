// Native call stacks, only with NCCLWATCH_BACKTRACE=1. libunwind is opened at run time with RTLD_LOCAL and never
// linked: as a dependency of a preloaded library its exported _Unwind_* functions would take over C++ exception
// unwinding for the whole host process. Frames are raw addresses at call time, symbolised at dump time.
#pragma once

#include <cstdint>
#include <string>

#include "shim/record/recorder.h"

namespace ncw {

// unw_backtrace from libunwind.so.8, or glibc's backtrace() if libunwind is absent; logs which one.
BacktraceFn load_backtrace_fn();

// "libfoo.so(func+0x12) [0x7f...]" via dladdr: only meaningful inside the process that recorded the address.
std::string symbolize(uint64_t addr);

}  // namespace ncw

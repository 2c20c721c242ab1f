// The shim's one clock. CLOCK_MONOTONIC is read through the vDSO (no syscall) and is comparable between processes
// on one boot of one host, so a sibling rank's watchdog can compare our timestamps with its own.
#pragma once

#include <time.h>

#include <cstdint>

namespace ncw {

inline uint64_t now_mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t now_real_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace ncw

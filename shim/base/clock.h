// The shim's one clock: CLOCK_MONOTONIC nanoseconds, comparable between processes on one boot of one host, so a
// sibling rank's watchdog can compare our timestamps with its own.
//
// On the hot path it is read as TSC ticks turned into nanoseconds with an anchor that our watchdog refreshes every
// second: two clock_gettime calls cost ~60 ns of a 100 ns budget under kvm-clock, two rdtsc ~25 ns. The TSC is used
// only where /proc/cpuinfo says it is constant and nonstop; otherwise (and until the first anchor) clock_gettime.
#pragma once

#include <time.h>
#include <x86intrin.h>

#include <atomic>
#include <cstdint>

namespace ncw {

inline uint64_t clock_mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t now_real_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// ns = mono_ns + (tsc - tsc) * mult >> 32. Anchors are immutable once published; readers take a pointer.
struct TscAnchor {
    uint64_t tsc;
    uint64_t mono_ns;
    uint64_t mult;  // nanoseconds per tick, 32.32 fixed point
};

extern std::atomic<const TscAnchor*> g_tsc_anchor;

inline uint64_t now_mono_ns() {
    const TscAnchor* a = g_tsc_anchor.load(std::memory_order_acquire);
    if (__builtin_expect(a == nullptr, 0)) return clock_mono_ns();
    // rdtsc is not ordered with the load above: a read an instant before a fresh anchor would be negative.
    int64_t d = int64_t(__rdtsc() - a->tsc);
    if (d < 0) d = 0;
    return a->mono_ns + uint64_t((unsigned __int128)uint64_t(d) * a->mult >> 32);
}

// The watchdog calls this about once a second: it measures the TSC rate against CLOCK_MONOTONIC over the interval
// since the last call and publishes a fresh anchor (or keeps clock_gettime where the TSC is unfit).
void refresh_tsc_anchor();

}  // namespace ncw

#include "shim/base/clock.h"

#include <cstdio>
#include <cstring>

namespace ncw {

std::atomic<const TscAnchor*> g_tsc_anchor{nullptr};

namespace {

bool tsc_is_fit() {
    static const bool fit = [] {
        FILE* f = fopen("/proc/cpuinfo", "r");
        if (!f) return false;
        char line[4096];
        bool constant = false, nonstop = false;
        while (fgets(line, sizeof(line), f)) {
            if (strncmp(line, "flags", 5) != 0) continue;
            constant = strstr(line, " constant_tsc") != nullptr;
            nonstop = strstr(line, " nonstop_tsc") != nullptr;
            break;
        }
        fclose(f);
        return constant && nonstop;
    }();
    return fit;
}

// A small ring of anchors, so a reader that loaded a pointer an instant before a refresh still reads whole values:
// a slot is rewritten only kSlots refreshes (about a minute) later.
constexpr int kSlots = 64;
TscAnchor g_slots[kSlots];
int g_next = 0;
uint64_t g_last_tsc = 0, g_last_ns = 0;

}  // namespace

void refresh_tsc_anchor() {
    if (!tsc_is_fit()) return;
    // Read the pair close together: the smaller the gap, the better the anchor.
    uint64_t t0 = __rdtsc();
    uint64_t ns = clock_mono_ns();
    uint64_t t1 = __rdtsc();
    uint64_t tsc = t0 + (t1 - t0) / 2;
    if (g_last_tsc && tsc > g_last_tsc && ns > g_last_ns + 100000000ull) {
        uint64_t mult = uint64_t((unsigned __int128)(ns - g_last_ns) << 32) / (tsc - g_last_tsc);
        TscAnchor& a = g_slots[g_next];
        g_next = (g_next + 1) % kSlots;
        a = TscAnchor{tsc, ns, mult};
        g_tsc_anchor.store(&a, std::memory_order_release);
    }
    if (!g_last_tsc || ns > g_last_ns + 100000000ull) {
        g_last_tsc = tsc;
        g_last_ns = ns;
    }
}

}  // namespace ncw

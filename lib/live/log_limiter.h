// Log lines rate-limited per cause, for the live collector (live_server.cpp): its own job, a token bucket per cause
// with the count of what it left out. No I/O and no clock: the caller passes `now` and writes the lines.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ncw::live {

// Log lines per cause (a fixed set of names from the code, never from the network): a burst, then a steady trickle;
// what is left out is counted and summed up now and then, so no cause can exhaust another's budget.
struct LogLimiter {
    static constexpr double kBurst = 10;
    static constexpr double kPerSecond = 0.2;
    struct Bucket {
        double tokens = kBurst;
        uint64_t last_ns = 0;
        uint64_t suppressed = 0;
    };
    std::map<std::string, Bucket> buckets;
    uint64_t last_summary_ns = 0;
    uint64_t suppressed_total = 0;

    bool allow(const std::string& cause, uint64_t now);
    // "cause: n, ..." of what was left out since the last summary; "" when nothing was.
    std::string take_summary();
    // What one cause left out since the last summary, taken out of it (a cause summed up on a line of its own).
    uint64_t take_suppressed(const std::string& cause);
};

// One line per key (a (job, rank) a wrong token claimed) at most every `period_ns`: a claim on a known job is named,
// each time it is new, however much else is refused. Bounded: past max_keys keys, allow() says false (the caller
// counts it with the flood).
struct KeyedLimiter {
    uint64_t period_ns = 60'000'000'000ull;
    size_t max_keys = 4096;
    std::map<std::string, uint64_t> last;  // key -> when last allowed

    bool allow(const std::string& key, uint64_t now);
};

}  // namespace ncw::live

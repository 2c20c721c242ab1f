// Log lines rate-limited per cause (see log_limiter.h).
#include "live/log_limiter.h"

#include <fmt/format.h>

#include <algorithm>

namespace ncw::live {

bool LogLimiter::allow(const std::string& cause, uint64_t now) {
    Bucket& b = buckets[cause];
    if (b.last_ns && now > b.last_ns)
        b.tokens = std::min(kBurst, b.tokens + double(now - b.last_ns) / 1e9 * kPerSecond);
    b.last_ns = now;
    if (b.tokens >= 1) {
        b.tokens -= 1;
        return true;
    }
    ++b.suppressed;
    ++suppressed_total;
    return false;
}

std::string LogLimiter::take_summary() {
    std::string out;
    for (auto& [cause, b] : buckets) {
        if (!b.suppressed) continue;
        out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", cause, b.suppressed);
        b.suppressed = 0;
    }
    return out;
}

}  // namespace ncw::live

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

uint64_t LogLimiter::take_suppressed(const std::string& cause) {
    auto it = buckets.find(cause);
    if (it == buckets.end()) return 0;
    const uint64_t n = it->second.suppressed;
    it->second.suppressed = 0;
    return n;
}

bool KeyedLimiter::allow(const std::string& key, uint64_t now) {
    auto it = last.find(key);
    if (it != last.end()) {
        if (now - it->second < period_ns) return false;
        it->second = now;
        return true;
    }
    if (last.size() >= max_keys)  // forget the keys whose period is over before refusing a new one
        std::erase_if(last, [&](const auto& kv) { return now - kv.second >= period_ns; });
    if (last.size() >= max_keys) return false;
    last.emplace(key, now);
    return true;
}

}  // namespace ncw::live

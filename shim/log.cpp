#include "log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>
#include <string>

namespace ncw {

namespace {

// "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ..." (RFC 3339, with the zone): the rank first,
// for a log of many ranks interleaved; "rank ?" until the process knows it.
std::string pattern_for(int global_rank) {
    return "[ncclwatch rank " + (global_rank >= 0 ? std::to_string(global_rank) : std::string("?")) +
           " pid %P %Y-%m-%dT%H:%M:%S.%e%z] %^%l%$: %v";
}

}  // namespace

spdlog::logger& log() {
    // Intentionally leaked: static destructors run at exit while our threads may still be logging.
    static spdlog::logger* logger = [] {
        auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
        auto* l = new spdlog::logger("ncclwatch", sink);
        l->set_pattern(pattern_for(-1));
        l->set_level(spdlog::level::info);
        l->flush_on(spdlog::level::trace);
        return l;
    }();
    return *logger;
}

void set_log_level(const char* level) { log().set_level(spdlog::level::from_str(level)); }

void set_log_rank(int global_rank) { log().set_pattern(pattern_for(global_rank)); }

}  // namespace ncw

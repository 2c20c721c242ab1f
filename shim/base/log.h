// The shim's own messages: spdlog (header-only) on stderr, prefixed so they stand out in a training log.
// The logger is created once and never destroyed, so our threads may still log while the process exits.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>

namespace ncw {

spdlog::logger& log();
void set_log_level(const char* level);  // trace|debug|info|warn|error|off
// Once the process knows its global rank (at the runtime's start, before its threads): the prefix names it.
void set_log_rank(int global_rank);

// Log a message at most once per call site: our own failures are reported once and then swallowed.
#define NCW_LOG_ONCE(level, ...)                                                                          \
    do {                                                                                                  \
        static std::atomic<bool> ncw_logged_once_{false};                                                 \
        if (!ncw_logged_once_.exchange(true, std::memory_order_relaxed)) ::ncw::log().level(__VA_ARGS__); \
    } while (0)

}  // namespace ncw

// The shim's own messages: spdlog (header-only) on stderr, prefixed so they stand out in a training log: short by
// default, "[ncclwatch r3] " (the global rank, as torch's "[rank3]:"), the time and pid being in the report and dump
// files; NCCLWATCH_LOG_FORMAT=full: "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ".
// The logger is created once and never destroyed, so our threads may still log while the process exits.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <string>

namespace ncw {

spdlog::logger& log();
void set_log_level(const char* level);  // trace|debug|info|warn|error|off
// full: the prefix with the pid, the time and the level (NCCLWATCH_LOG_FORMAT=full); set before the threads start.
void set_log_format(bool full);
// Once the process knows its global rank (at the runtime's start, before its threads): the prefix names it.
void set_log_rank(int global_rank);
// The prefix of a line, as the formatter writes it for this rank (-1: not known) without the time: for tests.
std::string log_prefix(int global_rank, bool full);

// Log a message at most once per call site: our own failures are reported once and then swallowed.
#define NCW_LOG_ONCE(level, ...)                                                                          \
    do {                                                                                                  \
        static std::atomic<bool> ncw_logged_once_{false};                                                 \
        if (!ncw_logged_once_.exchange(true, std::memory_order_relaxed)) ::ncw::log().level(__VA_ARGS__); \
    } while (0)

}  // namespace ncw

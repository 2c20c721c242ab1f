// The shim's own messages: spdlog (header-only) on stderr, prefixed so they stand out in a training log: short by
// default, "[ncclwatch r3] " (the global rank, as torch's "[rank3]:"), the time and pid being in the report and dump
// files; NCCLWATCH_LOG_FORMAT=full: "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ".
// The logger is created once and never destroyed, so our threads may still log while the process exits.
// Only log.cpp sees spdlog: a call site instantiates fmt's argument capture alone (make_format_args), and the
// formatting, the level test and the sink are compiled once there, not in every file that logs.
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <string>
#include <string_view>

namespace ncw {

constexpr size_t kMaxLogLineBytes = 2048;  // a report line is at most about 600; a 100 KB value is cut

enum class LogLevel { trace, debug, info, warn, error, critical, off };

class Logger {
public:
    template <class... A>
    void trace(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::trace, f, fmt::make_format_args(a...));
    }
    template <class... A>
    void debug(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::debug, f, fmt::make_format_args(a...));
    }
    template <class... A>
    void info(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::info, f, fmt::make_format_args(a...));
    }
    template <class... A>
    void warn(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::warn, f, fmt::make_format_args(a...));
    }
    template <class... A>
    void error(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::error, f, fmt::make_format_args(a...));
    }
    template <class... A>
    void critical(fmt::format_string<A...> f, A&&... a) {
        vlog(LogLevel::critical, f, fmt::make_format_args(a...));
    }
    // Whether a line at `level` is written (the level set by NCCLWATCH_LOG_LEVEL).
    bool enabled(LogLevel level) const;
    // Formats and writes the line when the level is enabled (log.cpp).
    void vlog(LogLevel level, fmt::string_view format, fmt::format_args args);
};

Logger& log();
// Every line is one line, of a sane length, whatever the values in it (an environment variable, a path): control
// characters as \n, \r, \t, \xNN, so that no value starts a line of its own (a forged "[ncclwatch r0] ..."),
// and at most max_bytes, then "... (N bytes)". Bytes from 0x80 up are kept: UTF-8 paths and names read as written.
std::string one_line(std::string_view text, size_t max_bytes = kMaxLogLineBytes);
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

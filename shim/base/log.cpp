#include "shim/base/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <string>

#include "read/redact.h"
#include "read/text.h"

namespace ncw {

namespace {

// %* : the message's time in the one format of every time ncclwatch writes (text::rfc3339).
class Rfc3339Flag : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(msg.time.time_since_epoch()).count();
        const std::string s = text::rfc3339(uint64_t(ns));
        dest.append(s.data(), s.data() + s.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<Rfc3339Flag>(); }
};

std::atomic<bool> g_full{false};
std::atomic<int> g_rank{-1};

// The pattern: short, "[ncclwatch r3] ..." ("[ncclwatch] " until the process knows its rank); full, "[ncclwatch rank 3
// pid 9179 2026-12-01T18:23:56.609+00:00] error: ..." (RFC 3339, with the zone; "rank ?" until it knows). The rank
// first, for a log of many ranks interleaved.
std::string pattern_for(int global_rank, bool full) {
    if (!full) return global_rank >= 0 ? "[ncclwatch r" + std::to_string(global_rank) + "] %v" : "[ncclwatch] %v";
    return "[ncclwatch rank " + (global_rank >= 0 ? std::to_string(global_rank) : std::string("?")) +
           " pid %P %*] %^%l%$: %v";
}

std::unique_ptr<spdlog::formatter> formatter_for(int global_rank, bool full) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<Rfc3339Flag>('*').set_pattern(pattern_for(global_rank, full));
    return f;
}

spdlog::logger& sink_logger() {
    // Intentionally leaked: static destructors run at exit while our threads may still be logging.
    static spdlog::logger* logger = [] {
        auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
        auto* l = new spdlog::logger("ncclwatch", sink);
        l->set_formatter(formatter_for(-1, false));
        l->set_level(spdlog::level::info);
        l->flush_on(spdlog::level::trace);
        return l;
    }();
    return *logger;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
    switch (level) {
        case LogLevel::trace: return spdlog::level::trace;
        case LogLevel::debug: return spdlog::level::debug;
        case LogLevel::info: return spdlog::level::info;
        case LogLevel::warn: return spdlog::level::warn;
        case LogLevel::error: return spdlog::level::err;
        case LogLevel::critical: return spdlog::level::critical;
        case LogLevel::off: break;
    }
    return spdlog::level::off;
}

}  // namespace

bool Logger::enabled(LogLevel level) const { return sink_logger().should_log(to_spdlog(level)); }

void Logger::vlog(LogLevel level, fmt::string_view format, fmt::format_args args) {
    spdlog::logger& l = sink_logger();
    const auto lvl = to_spdlog(level);
    if (!l.should_log(lvl)) return;
    try {
        fmt::memory_buffer text;
        fmt::vformat_to(fmt::appender(text), format, args);
        // A value a line quotes (a setting, an address, a path) never shows a credential: the one rule of every output.
        const std::string line = one_line(redact::value(std::string_view(text.data(), text.size())));
        l.log(lvl, spdlog::string_view_t(line.data(), line.size()));
    } catch (...) {
        // A message we cannot format is dropped: logging never throws into the caller.
    }
}

std::string one_line(std::string_view text, size_t max_bytes) {
    return text::echo(text, max_bytes, text::EchoMode::Line);
}

Logger& log() {
    static Logger logger;
    return logger;
}

void set_log_level(const char* level) { sink_logger().set_level(spdlog::level::from_str(level)); }

void set_log_format(bool full) {
    g_full.store(full);
    sink_logger().set_formatter(formatter_for(g_rank.load(), full));
}

void set_log_rank(int global_rank) {
    g_rank.store(global_rank);
    sink_logger().set_formatter(formatter_for(global_rank, g_full.load()));
}

std::string log_prefix(int global_rank, bool full) {
    std::string p = pattern_for(global_rank, full);
    return p.substr(0, p.find('%'));
}

}  // namespace ncw

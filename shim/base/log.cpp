#include "shim/base/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <mutex>
#include <string>

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

}  // namespace

spdlog::logger& log() {
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

void set_log_level(const char* level) { log().set_level(spdlog::level::from_str(level)); }

void set_log_format(bool full) {
    g_full.store(full);
    log().set_formatter(formatter_for(g_rank.load(), full));
}

void set_log_rank(int global_rank) {
    g_rank.store(global_rank);
    log().set_formatter(formatter_for(global_rank, g_full.load()));
}

std::string log_prefix(int global_rank, bool full) {
    std::string p = pattern_for(global_rank, full);
    return p.substr(0, p.find('%'));
}

}  // namespace ncw

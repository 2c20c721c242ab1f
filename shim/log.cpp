#include "log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>

namespace ncw {

spdlog::logger& log() {
    // Intentionally leaked: static destructors run at exit while our threads may still be logging.
    static spdlog::logger* logger = [] {
        auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
        auto* l = new spdlog::logger("ncclwatch", sink);
        l->set_pattern("[ncclwatch %Y-%m-%d %H:%M:%S.%e pid %P] %^%l%$: %v");
        l->set_level(spdlog::level::info);
        l->flush_on(spdlog::level::trace);
        return l;
    }();
    return *logger;
}

void set_log_level(const char* level) { log().set_level(spdlog::level::from_str(level)); }

}  // namespace ncw

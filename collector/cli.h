// The collector's commands, one file each (cmd_*.cpp), and the small helpers they share.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "report/report_json.h"

namespace ncw::cli {

inline constexpr const char* kProg = "ncclwatch-collector";
extern const char* const kUsage;

int cmd_env();
int cmd_analyze(const std::vector<std::string>& args);
int cmd_dump(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);

using report::clean;  // text from a file goes to a terminal: no control characters

// Milliseconds since the file's start; "-" for "never".
inline std::string rel_ms(uint64_t t, uint64_t start) {
    if (!t) return "-";
    return fmt::format("{:.3f}", double(int64_t(t - start)) / 1e6);
}

}  // namespace ncw::cli

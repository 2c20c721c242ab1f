// The collector's commands, one file each (cmd_*.cpp), and the small helpers they share. main.cpp builds the command
// line (CLI11): each command adds its options to its subcommand and returns what runs it once the line has parsed.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "read/endpoint.h"
#include "report/report_json.h"

namespace ncw::cli {

inline constexpr const char* kProg = "ncclwatch-collector";

// A usage error found after parsing (no input given, ...): main prints it as one line plus "see --help", exit 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

using Command = std::function<int()>;
Command add_env(CLI::App& sub);
Command add_analyze(CLI::App& sub);
Command add_dump(CLI::App& sub);
Command add_serve(CLI::App& sub);
Command add_relay(CLI::App& sub);

// An option that takes a value: `parse` turns the text into the value and says false when it cannot, which is the
// usage error "--NAME: 'TEXT' is not WHAT" (cli_options.cpp).
CLI::Option* add_value(CLI::App& app, const std::string& name, const std::string& type_name, const std::string& desc,
                       std::function<bool(const std::string&)> parse, const std::string& what);
// An address: read/endpoint.h's parse_endpoint by the rules of `kind`, the text kept in `out`. A value it refuses is
// the usage error "--NAME: 'TEXT': WHY (expected FORMS)", the parser's one line.
CLI::Option* add_endpoint(CLI::App& app, const std::string& name, const std::string& desc, EndpointKind kind,
                          std::string& out);
// Seconds: a finite number >= 0 (and <= max).
bool parse_seconds(const std::string& s, double& out, double max = 1e300);
// A count or a size: digits, optionally K, M or G (binary multiples) when `suffixes`.
bool parse_count(const std::string& s, size_t& out, bool suffixes);

using report::clean;  // text from a file goes to a terminal: no control characters

// Milliseconds since the file's start; "-" for "never".
inline std::string rel_ms(uint64_t t, uint64_t start) {
    if (!t) return "-";
    return fmt::format("{:.3f}", double(int64_t(t - start)) / 1e6);
}

}  // namespace ncw::cli

// Option values for the collector's command line: numbers, sizes, addresses and their usage errors, in one wording.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "cli.h"

namespace ncw::cli {

CLI::Option* add_value(CLI::App& app, const std::string& name, const std::string& type_name, const std::string& desc,
                       std::function<bool(const std::string&)> parse, const std::string& what) {
    auto* opt = app.add_option_function<std::string>(
        name,
        [shown = name.substr(0, name.find(',')), what, parse = std::move(parse)](const std::string& v) {
            if (!parse(v)) throw CLI::ValidationError(fmt::format("{}: '{}' is not {}", shown, clean(v), what));
        },
        desc);
    opt->type_name(type_name);
    return opt;
}

CLI::Option* add_endpoint(CLI::App& app, const std::string& name, const std::string& desc, EndpointKind kind,
                          std::string& out) {
    auto* opt = app.add_option_function<std::string>(
        name,
        [shown = name.substr(0, name.find(',')), kind, &out](const std::string& v) {
            Endpoint ep;
            std::string why;
            if (!parse_endpoint(v, ep, &why, kind)) throw CLI::ValidationError(fmt::format("{}: {}", shown, why));
            out = v;
        },
        desc);
    opt->type_name("HOST:PORT");
    return opt;
}

bool parse_seconds(const std::string& s, double& out, double max) {
    char* end = nullptr;
    errno = 0;
    const double v = strtod(s.c_str(), &end);
    if (s.empty() || errno || *end || !std::isfinite(v) || v < 0 || v > max) return false;
    out = v;
    return true;
}

bool parse_count(const std::string& s, size_t& out, bool suffixes) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = strtoull(s.c_str(), &end, 10);
    if (s.empty() || !isdigit((unsigned char)s[0]) || errno) return false;
    unsigned shift = 0;
    if (suffixes && (*end == 'K' || *end == 'k'))
        shift = 10, ++end;
    else if (suffixes && *end == 'M')
        shift = 20, ++end;
    else if (suffixes && *end == 'G')
        shift = 30, ++end;
    if (*end || v > (1ull << 40) >> shift) return false;
    out = size_t(v << shift);
    return true;
}

}  // namespace ncw::cli

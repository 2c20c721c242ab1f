#include "shim/base/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ncclwatch/config_table.h"
#include "read/endpoint.h"
#include "read/redact.h"
#include "read/text.h"

namespace ncw {
namespace {

using config_default::Kind;

struct Entry {
    const char* name;
    Kind kind;
    const char* def;
    const char* accepted;
};

std::string bad_value(const Entry& e, const char* value) {
    // Cut and escaped: a hostile or broken value (100 KB, raw newlines) must not flood or forge the log.
    return std::string(e.name) + "='" + text::echo(redact::env_value(e.name, value)) +
           "' is not valid (accepted: " + e.accepted + "); using the default " + e.def;
}

bool parse_bool(const char* v, bool& out) {
    std::string s(v);
    for (auto& c : s) c = char(tolower(c));
    if (s == "1" || s == "true" || s == "yes" || s == "on") return out = true, true;
    if (s == "0" || s == "false" || s == "no" || s == "off") return out = false, true;
    return false;
}

// "min..max" from the table's accepted column.
void range_of(const char* accepted, double& lo, double& hi) {
    lo = strtod(accepted, nullptr);
    const char* dots = strstr(accepted, "..");
    hi = dots ? strtod(dots + 2, nullptr) : lo;
}

bool parse_number(const Entry& e, const char* v, bool integral, double& out) {
    errno = 0;
    char* end = nullptr;
    double d = integral ? double(strtoll(v, &end, 10)) : strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !std::isfinite(d)) return false;
    double lo, hi;
    range_of(e.accepted, lo, hi);
    if (d < lo || d > hi) return false;
    out = d;
    return true;
}

bool parse_enum(const Entry& e, const char* v, std::string& out) {
    std::string accepted = e.accepted;
    size_t start = 0;
    while (start <= accepted.size()) {
        size_t bar = accepted.find('|', start);
        if (bar == std::string::npos) bar = accepted.size();
        if (accepted.compare(start, bar - start, v) == 0 && strlen(v) == bar - start) return out = v, true;
        start = bar + 1;
    }
    return false;
}

// Assigns a parsed value to a Config field of any of the kinds above.
void assign(bool& field, bool v, double, const std::string&) { field = v; }
void assign(int& field, bool, double d, const std::string&) { field = int(d); }
void assign(double& field, bool, double d, const std::string&) { field = d; }
void assign(std::string& field, bool, double, const std::string& s) { field = s; }
void assign(GpuSample& field, bool, double, const std::string& s) {
    field = s == "all" ? GpuSample::All : GpuSample::Auto;
}
void assign(ProfilerMode& field, bool, double, const std::string& s) {
    field = s == "off" ? ProfilerMode::Off : s == "empty" ? ProfilerMode::Empty : ProfilerMode::Auto;
}
void assign(Action& field, bool, double, const std::string& s) {
    field = s == "abort" ? Action::Abort : s == "kill" ? Action::Kill : Action::Report;
}
void assign(LogFormat& field, bool, double, const std::string& s) {
    field = s == "full" ? LogFormat::Full : LogFormat::Short;
}

template <typename Field>
void parse_one(const Entry& e, const char* value, Field& field, std::vector<std::string>& warnings) {
    if (!value) return;
    bool b = false;
    double d = 0;
    std::string s;
    bool ok = true;
    switch (e.kind) {
        case Kind::Bool: ok = parse_bool(value, b); break;
        case Kind::Int: ok = parse_number(e, value, true, d); break;
        case Kind::Double: ok = parse_number(e, value, false, d); break;
        case Kind::Enum: ok = parse_enum(e, value, s); break;
        case Kind::String: s = value; break;
    }
    if (!ok) {
        warnings.push_back(bad_value(e, value));
        return;
    }
    assign(field, b, d, s);
}

uint32_t round_up_pow2(uint32_t v) {
    uint32_t p = 1;
    while (p < v) p <<= 1;
    return p;
}

}  // namespace

int derive_auto_port(int configured_port, const char* master_port) {
    if (configured_port > 0) return configured_port;
    if (master_port && *master_port) {
        char* end = nullptr;
        errno = 0;
        const long p = strtol(master_port, &end, 10);
        if (end != master_port && *end == '\0' && errno == 0 && p >= 1 && p < 65535) return int(p + 1);
    }
    return 29610;
}

Config parse_config(const GetEnv& getenv_fn, std::vector<std::string>& warnings) {
    Config c;
#define NCW_PARSE(field, name, kind, type, def, accepted, desc) \
    parse_one(Entry{name, Kind::kind, def, accepted}, getenv_fn(name), c.field, warnings);
    NCW_CONFIG_TABLE(NCW_PARSE)
#undef NCW_PARSE
    c.ring_size = int(round_up_pow2(uint32_t(c.ring_size)));
    if (!c.collector.empty()) {
        Endpoint ep;
        std::string why;
        if (!parse_endpoint(c.collector, ep, &why, EndpointKind::Collector)) {
            warnings.push_back("NCCLWATCH_COLLECTOR=" + why + "; live digests are off");
            c.collector.clear();
        }
    }
    c.collector_port = derive_auto_port(c.collector_port, getenv_fn("MASTER_PORT"));
    if (c.dir.empty()) {
        const char* tmp = getenv_fn("TMPDIR");
        c.dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/ncclwatch";
    }
    return c;
}

std::string parse_nccl_library(const GetEnv& getenv_fn) {
    Config c;
    std::vector<std::string> ignored;  // a String row takes any value
#define NCW_PARSE_LIBRARY(field, name, kind, type, def, accepted, desc) \
    if constexpr (std::string_view(#field) == "nccl_library")           \
        parse_one(Entry{name, Kind::kind, def, accepted}, getenv_fn(name), c.field, ignored);
    NCW_CONFIG_TABLE(NCW_PARSE_LIBRARY)
#undef NCW_PARSE_LIBRARY
    return c.nccl_library;
}

const char* action_name(Action a) {
    switch (a) {
        case Action::Report: return "report";
        case Action::Abort: return "abort";
        case Action::Kill: return "kill";
    }
    return "report";
}

}  // namespace ncw

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "shim/base/config.h"

using namespace ncw;

namespace {

Config parse(std::map<std::string, std::string> env, std::vector<std::string>& warnings) {
    return parse_config(
        [&](const char* n) -> const char* {
            auto it = env.find(n);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        warnings);
}

}  // namespace

TEST_CASE("defaults") {
    std::vector<std::string> w;
    Config c = parse({}, w);
    CHECK(w.empty());
    CHECK(c.enable);
    CHECK(c.timeout_sec == 60);
    CHECK(c.action == Action::Report);
    CHECK(c.ring_size == 16384);
    CHECK(c.dir == "/tmp/ncclwatch");
    CHECK(c.gpu_events);
    CHECK_FALSE(c.backtrace);
    CHECK(c.log_format == LogFormat::Short);  // "[ncclwatch r3] ": quiet by default
}

TEST_CASE("valid values are taken") {
    std::vector<std::string> w;
    Config c = parse({{"NCCLWATCH_TIMEOUT_SEC", "2.5"},
                      {"NCCLWATCH_ACTION", "abort"},
                      {"NCCLWATCH_RING_SIZE", "1000"},
                      {"NCCLWATCH_ENABLE", "off"},
                      {"NCCLWATCH_BACKTRACE", "TRUE"},
                      {"NCCLWATCH_LOG_FORMAT", "full"},
                      {"TMPDIR", "/scratch"}},
                     w);
    CHECK(w.empty());
    CHECK(c.timeout_sec == 2.5);
    CHECK(c.action == Action::Abort);
    CHECK(c.ring_size == 1024);  // rounded up to a power of two
    CHECK_FALSE(c.enable);
    CHECK(c.backtrace);
    CHECK(c.log_format == LogFormat::Full);
    CHECK(c.dir == "/scratch/ncclwatch");
}

TEST_CASE("a bad value names the variable and the accepted values, and keeps the default") {
    std::vector<std::string> w;
    Config c = parse({{"NCCLWATCH_TIMEOUT_SEC", "soon"},
                      {"NCCLWATCH_ACTION", "explode"},
                      {"NCCLWATCH_POLL_MS", "1"},
                      {"NCCLWATCH_ENABLE", "maybe"}},
                     w);
    REQUIRE(w.size() == 4);
    CHECK(c.timeout_sec == 60);
    CHECK(c.action == Action::Report);
    CHECK(c.poll_ms == 100);
    CHECK(c.enable);
    // In table order.
    CHECK_THAT(w[0], Catch::Contains("NCCLWATCH_ENABLE='maybe'") && Catch::Contains("0|1"));
    CHECK_THAT(w[1], Catch::Contains("NCCLWATCH_TIMEOUT_SEC='soon'") && Catch::Contains("0.1..86400") &&
                         Catch::Contains("default 60"));
    CHECK_THAT(w[2], Catch::Contains("NCCLWATCH_POLL_MS") && Catch::Contains("10..5000"));
    CHECK_THAT(w[3], Catch::Contains("NCCLWATCH_ACTION='explode'") && Catch::Contains("report|abort|kill"));
}

TEST_CASE("a bad value is echoed cut to 200 characters and escaped, on one line") {
    std::string huge;
    for (int i = 0; i < 10000; ++i) huge += "junk\n\x1b[2J";  // 100 KB with raw newlines and escapes
    std::vector<std::string> w;
    parse({{"NCCLWATCH_TIMEOUT_SEC", huge.c_str()}, {"NCCLWATCH_COLLECTOR", huge.c_str()}}, w);
    REQUIRE(w.size() == 2);
    for (const auto& m : w) {
        CHECK(m.size() < 400);
        CHECK(m.find('\n') == std::string::npos);
        CHECK(m.find('\x1b') == std::string::npos);
        CHECK_THAT(
            m, Catch::Contains("junk\\n\\x1b[2J") && Catch::Contains("(" + std::to_string(huge.size()) + " bytes)"));
    }
    CHECK_THAT(w[0], Catch::Contains("NCCLWATCH_TIMEOUT_SEC='junk") && Catch::Contains("default 60"));
}

// The table (include/ncclwatch/config_table.h) and Config cannot disagree: Config is generated from the table and
// starts at its DEFAULT column (checked at compile time); here the runtime parser reads every DEFAULT back to the
// same value, and every accepted value of an enum-typed row maps to the enumerator at its position in ACCEPTED.
TEST_CASE("every table default parses to Config's initial value") {
    const Config initial;
#define NCW_CHECK_DEFAULT(field, name, kind, type, def, accepted, desc) \
    if (config_default::is_derived(#field)) {                           \
        CHECK(initial.field == type{});                                 \
    } else {                                                            \
        std::vector<std::string> w;                                     \
        const Config c = parse({{name, def}}, w);                       \
        INFO(name << "=" << def);                                       \
        CHECK(w.empty());                                               \
        CHECK(c.field == initial.field);                                \
    }
    NCW_CONFIG_TABLE(NCW_CHECK_DEFAULT)
#undef NCW_CHECK_DEFAULT
}

namespace {

// Parses each value of "a|b|c" alone and checks that `get` finds the enumerator at its position.
template <class T, class Get>
void check_enum_order(const char* name, const std::string& accepted, Get get) {
    if constexpr (std::is_enum_v<T>) {
        int index = 0;
        for (size_t start = 0; start <= accepted.size(); ++index) {
            size_t bar = accepted.find('|', start);
            if (bar == std::string::npos) bar = accepted.size();
            std::vector<std::string> w;
            const std::string value = accepted.substr(start, bar - start);
            INFO(name << "=" << value);
            CHECK(int(get(parse({{name, value}}, w))) == index);
            start = bar + 1;
        }
    }
}

}  // namespace

TEST_CASE("enum-typed rows list their enumerators in order") {
#define NCW_CHECK_ENUM(field, name, kind, type, def, accepted, desc) \
    check_enum_order<type>(name, accepted, [](const Config& c) { return c.field; });
    NCW_CONFIG_TABLE(NCW_CHECK_ENUM)
#undef NCW_CHECK_ENUM
}

TEST_CASE("NCCLWATCH_NCCL_LIBRARY parses alone, as the resolver needs it") {
    std::map<std::string, std::string> env{{"NCCLWATCH_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2"}};
    auto get = [&](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    CHECK(parse_nccl_library(get) == "/opt/nccl/libnccl.so.2");
    std::vector<std::string> w;
    CHECK(parse_config(get, w).nccl_library == parse_nccl_library(get));
    env.clear();
    CHECK(parse_nccl_library(get).empty());
}

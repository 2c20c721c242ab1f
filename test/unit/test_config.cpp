#include <catch2/catch.hpp>
#include <map>

#include "config.h"

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
}

TEST_CASE("valid values are taken") {
    std::vector<std::string> w;
    Config c = parse({{"NCCLWATCH_TIMEOUT_SEC", "2.5"},
                      {"NCCLWATCH_ACTION", "abort"},
                      {"NCCLWATCH_RING_SIZE", "1000"},
                      {"NCCLWATCH_ENABLE", "off"},
                      {"NCCLWATCH_BACKTRACE", "TRUE"},
                      {"TMPDIR", "/scratch"}},
                     w);
    CHECK(w.empty());
    CHECK(c.timeout_sec == 2.5);
    CHECK(c.action == Action::Abort);
    CHECK(c.ring_size == 1024);  // rounded up to a power of two
    CHECK_FALSE(c.enable);
    CHECK(c.backtrace);
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

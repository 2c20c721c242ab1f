// Where the live digest client connects and when it retries: endpoints, the auto port, resolve_endpoint from the
// config, the reconnect backoff, and auto's loopback rule.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#define NCW_HAVE_LIVE_SERVER 1  // as shim/meson.build defines it for the shim: this tree has lib/live
#include "shim/live/collector_endpoint.h"
#include "shim/base/config.h"

using namespace ncw;
using namespace ncw::live_client;

// Every rule of the parser, per kind of address: test/unit/read/test_endpoint.cpp. Here, what the shim takes.
TEST_CASE("parse_endpoint takes host:port and [v6]:port, and says what is wrong otherwise") {
    Endpoint ep;
    std::string err;
    REQUIRE(parse_endpoint("node0:29610", ep, &err));
    CHECK(ep.host == "node0");
    CHECK(ep.port == 29610);
    REQUIRE(parse_endpoint("10.1.2.3:1", ep, &err));
    CHECK(ep.host == "10.1.2.3");
    CHECK(ep.port == 1);
    REQUIRE(parse_endpoint("[::1]:65535", ep, &err));
    CHECK(ep.host == "::1");
    CHECK(ep.port == 65535);

    const std::map<std::string, std::string> bad = {
        {"node0", "no port"},         {"node0:", "no port after"},     {":29610", "no host"},
        {"node0:0", "1..65535"},      {"node0:65536", "1..65535"},     {"node0:12ab", "not a number"},
        {"::1:80", "needs brackets"}, {"[::1:80", "no closing"},       {"[::1]80", "no ':PORT'"},
        {"node0:-5", "not a number"}, {"node0:999999", "1..65535"},    {"host:99999", "1..65535"},
        {"nonsense", "no port"},      {"999.0.0.1:80", "not an IPv4"}, {"*:80", "for listening only"}};
    for (const auto& [in, why] : bad) {
        INFO(in);
        err.clear();
        CHECK_FALSE(parse_endpoint(in, ep, &err));
        CHECK_THAT(err, Catch::Contains(why) && Catch::Contains(in));
    }
}

TEST_CASE("the auto port: NCCLWATCH_COLLECTOR_PORT, else MASTER_PORT+1, else 29610") {
    CHECK(derive_auto_port(0, nullptr) == 29610);
    CHECK(derive_auto_port(0, "") == 29610);
    CHECK(derive_auto_port(0, "29500") == 29501);
    CHECK(derive_auto_port(0, "junk") == 29610);
    CHECK(derive_auto_port(0, "65535") == 29610);  // +1 would not be a port
    CHECK(derive_auto_port(4242, "29500") == 4242);
}

TEST_CASE("resolve_endpoint") {
    Config c;
    Endpoint ep;
    std::string err;
    CHECK_FALSE(resolve_endpoint(c, "node0", ep, &err));
    // The setting in the parser's words, with auto among the forms it takes.
    c.collector = "collector:99999";
    CHECK_FALSE(resolve_endpoint(c, "node0", ep, &err));
    CHECK(err ==
          "'collector:99999': the port 99999 is not in 1..65535 (expected auto, HOST:PORT or [IPv6]:PORT, the port "
          "1..65535)");
    c.collector = "collector:9";
    REQUIRE(resolve_endpoint(c, nullptr, ep, &err));
    CHECK(ep.host == "collector");
    CHECK(ep.port == 9);
    c.collector = "auto";
    c.collector_port = 29501;
    CHECK_FALSE(resolve_endpoint(c, nullptr, ep, &err));
    CHECK_THAT(err, Catch::Contains("MASTER_ADDR"));
    REQUIRE(resolve_endpoint(c, "node0", ep, &err));
    CHECK(ep.host == "node0");
    CHECK(ep.port == 29501);
    REQUIRE(resolve_endpoint(c, "[fe80::1]", ep, &err));
    CHECK(ep.host == "fe80::1");
}

TEST_CASE("backoff doubles from 0.5 s to 30 s, with jitter in the upper half, and resets") {
    Backoff b(0.5, 30.0, 42);
    double prev_max = 0;
    for (int i = 0; i < 20; ++i) {
        const double want = std::min(30.0, 0.5 * double(1 << std::min(i, 20)));
        const double d = b.next_delay_s();
        INFO("attempt " << i << " delay " << d);
        CHECK(d >= want / 2);
        CHECK(d <= want);
        prev_max = std::max(prev_max, d);
    }
    CHECK(prev_max <= 30.0);
    b.reset();
    CHECK(b.next_delay_s() <= 0.5);
    // Two ranks with different seeds do not retry in lockstep.
    Backoff x(0.5, 30.0, 1), y(0.5, 30.0, 2);
    bool differ = false;
    for (int i = 0; i < 5; ++i) differ |= x.next_delay_s() != y.next_delay_s();
    CHECK(differ);
}

// Attack test (issue 15): without NCCLWATCH_TOKEN, `serve` listens only on loopback; the collector that auto embeds in
// rank 0 held to no such rule and listened on MASTER_ADDR, open to every host that can reach it. The same rule holds
// now: loopback without a token (there is no insecure option for auto), MASTER_ADDR with one.
TEST_CASE("auto without a token: rank 0's collector listens on loopback only; with one, on MASTER_ADDR") {
    Config c;
    c.collector = "auto";
    const Endpoint master{"192.0.2.2", 29501};  // a non-loopback MASTER_ADDR
    CHECK(auto_loopback_only(c));
    CHECK(embedded_server_options(c, master).listen == "127.0.0.1:29501");
    CHECK(embedded_server_options(c, Endpoint{"fd00::2", 29501}).listen == "127.0.0.1:29501");
    c.token = "s3cret";
    CHECK_FALSE(auto_loopback_only(c));
    CHECK(embedded_server_options(c, master).listen == "192.0.2.2:29501");
    CHECK(embedded_server_options(c, Endpoint{"fd00::2", 29501}).listen == "[fd00::2]:29501");
    // /metrics on the collector's address (the same rule) and the next port; none past 65535.
    CHECK(embedded_server_options(c, master).metrics_listen == "192.0.2.2:29502");
    CHECK(embedded_server_options(c, Endpoint{"fd00::2", 29501}).metrics_listen == "[fd00::2]:29502");
    CHECK(embedded_server_options(c, Endpoint{"192.0.2.2", 65535}).metrics_listen.empty());
    c.token.clear();
    CHECK(embedded_server_options(c, master).metrics_listen == "127.0.0.1:29502");
    // NCCLWATCH_METRICS_PORT: that port instead, past 65535's collector too.
    c.metrics_port = 9400;
    CHECK(embedded_server_options(c, master).metrics_listen == "127.0.0.1:9400");
    CHECK(embedded_server_options(c, Endpoint{"192.0.2.2", 65535}).metrics_listen == "127.0.0.1:9400");
    // An explicit HOST:PORT is a `serve` elsewhere, which applies the rule itself.
    Config explicit_ep;
    explicit_ep.collector = "node0:29610";
    CHECK_FALSE(auto_loopback_only(explicit_ep));
}

TEST_CASE("auto without a token: the ranks of rank 0's host connect to loopback, the others send nothing and say why") {
    Config c;
    c.collector = "auto";
    std::string why;
    // Rank 0 runs the collector: it is on MASTER_ADDR's host by definition.
    Endpoint ep{"198.51.100.7", 29501};
    REQUIRE(apply_loopback_rule(c, true, ep, &why));
    CHECK(ep.host == "127.0.0.1");
    CHECK(ep.port == 29501);
    // Another rank whose MASTER_ADDR is this host: by loopback, by name, or by an address of an interface here.
    char name[256] = {};
    REQUIRE(gethostname(name, sizeof name - 1) == 0);
    for (const std::string& host : std::vector<std::string>{"127.0.0.1", "localhost", name}) {
        INFO(host);
        Endpoint here{host, 29501};
        CHECK(is_this_host(host));
        REQUIRE(apply_loopback_rule(c, false, here, &why));
        CHECK(here.host == "127.0.0.1");
    }
    // A rank on another host (TEST-NET-2: no interface here has it) sends nothing, and the reason says what to set.
    Endpoint there{"198.51.100.7", 29501};
    CHECK_FALSE(is_this_host("198.51.100.7"));
    CHECK_FALSE(apply_loopback_rule(c, false, there, &why));
    CHECK_THAT(
        why, Catch::Contains("loopback only") && Catch::Contains("NCCLWATCH_TOKEN") && Catch::Contains("198.51.100.7"));
    // With a token nothing changes: every rank connects to MASTER_ADDR.
    c.token = "s3cret";
    REQUIRE(apply_loopback_rule(c, false, there, &why));
    CHECK(there.host == "198.51.100.7");
}

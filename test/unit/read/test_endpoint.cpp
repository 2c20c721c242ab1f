// HOST:PORT (read/endpoint.h): every rule of the one parser, for each kind of address (connect, the shim's collector
// setting with "auto", listen), each refusal one line that names the value and what is wrong.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "read/endpoint.h"

using namespace ncw;

namespace {

struct Bad {
    std::string in;
    std::string why;  // a part of the error after the value
};

// The refusals every kind shares: a host and a port are needed, the port in range and in digits.
const std::vector<Bad> kBadEverywhere = {
    {"", "empty"},
    {"nonsense", "no port after the host"},
    {"node0", "no port after the host"},
    {"host:", "no port after ':'"},
    {"127.0.0.1:99999", "the port 99999 is not in "},
    {"127.0.0.1:65536", "the port 65536 is not in "},
    {"node0:999999", "the port 999999 is not in "},
    {"node0:18446744073709551617", "the port 18446744073709551617 is not in "},
    {"node0:99999999999999999999999999999999", "is not in "},
    {"node0:12ab", "the port '12ab' is not a number"},
    {"node0:-5", "the port '-5' is not a number"},
    {"node0:+5", "the port '+5' is not a number"},
    {"node0: 80", "the port ' 80' is not a number"},
    {"node0:80 ", "the port '80 ' is not a number"},
    {"node0:0x50", "the port '0x50' is not a number"},
    {"::1:80", "an IPv6 address needs brackets, as [::1]:PORT"},
    {"[::1:80", "no closing ']'"},
    {"[::1]80", "no ':PORT' after ']'"},
    {"[::1]", "no ':PORT' after ']'"},
    {"[]:80", "no host between '[' and ']'"},
    {"[zz::1]:80", "the host 'zz::1' is not an IPv6 address"},
    {"[10.0.0.1]:80", "the host '10.0.0.1' is not an IPv6 address"},
    {"[fe80::1%]:80", "is not an IPv6 address"},
    {"[fe80::1%e/0]:80", "is not an IPv6 address"},
    {"999.0.0.1:80", "the host '999.0.0.1' is not an IPv4 address"},
    {"10.0.0:80", "the host '10.0.0' is not an IPv4 address"},
    {"a b:80", "the host 'a b' is not a host name or an address"},
    {"node/0:80", "the host 'node/0' is not a host name or an address"},
    {"user@node0:80", "is not a host name or an address"},
    {"-node0:80", "is not a host name or an address"},
    {".node0:80", "is not a host name or an address"},
    {"node..0:80", "is not a host name or an address"},
    {std::string(254, 'a') + ":80", "the host is longer than 253 characters"},
    {"node\n0:80", "is not a host name or an address"},
};

}  // namespace

TEST_CASE("parse_endpoint: what every kind accepts") {
    for (auto kind : {EndpointKind::Connect, EndpointKind::Collector, EndpointKind::Listen}) {
        Endpoint ep;
        std::string err;
        REQUIRE(parse_endpoint("node0:29610", ep, &err, kind));
        CHECK(ep.host == "node0");
        CHECK(ep.port == 29610);
        REQUIRE(parse_endpoint("10.1.2.3:1", ep, &err, kind));
        CHECK(ep.host == "10.1.2.3");
        CHECK(ep.port == 1);
        REQUIRE(parse_endpoint("[::1]:65535", ep, &err, kind));
        CHECK(ep.host == "::1");
        CHECK(ep.port == 65535);
        REQUIRE(parse_endpoint("[fe80::1%eth0]:29610", ep, &err, kind));
        CHECK(ep.host == "fe80::1%eth0");
        REQUIRE(parse_endpoint("[::ffff:10.0.0.1]:80", ep, &err, kind));
        REQUIRE(parse_endpoint("node-0.cluster_a.example.:029610", ep, &err, kind));  // leading zeros: decimal
        CHECK(ep.host == "node-0.cluster_a.example.");
        CHECK(ep.port == 29610);
        REQUIRE(parse_endpoint(std::string(253, 'a') + ":80", ep, &err, kind));
        CHECK(err.empty());
    }
}

TEST_CASE("parse_endpoint: each refusal is one line naming the value, what is wrong, and the forms accepted") {
    for (auto kind : {EndpointKind::Connect, EndpointKind::Collector, EndpointKind::Listen}) {
        for (const auto& b : kBadEverywhere) {
            INFO(b.in << " kind " << int(kind));
            Endpoint ep{"untouched", 7};
            std::string err;
            CHECK_FALSE(parse_endpoint(b.in, ep, &err, kind));
            CHECK_THAT(err, Catch::Contains(b.why));
            CHECK(err.find('\n') == std::string::npos);
            CHECK(err.size() < 600);
            // The value, quoted and escaped, first; the accepted forms last.
            if (b.in.find('\n') == std::string::npos && b.in.size() < 100) CHECK(err.rfind("'" + b.in + "': ", 0) == 0);
            CHECK_THAT(err, Catch::EndsWith(std::string(" (expected ") + endpoint_forms(kind) + ")"));
            CHECK(ep.host == "untouched");  // nothing written on a refusal
            CHECK(ep.port == 7);
        }
    }
    std::string err;
    Endpoint ep;
    CHECK_FALSE(parse_endpoint("nonsense", ep, nullptr));  // no error wanted: none written
    CHECK_FALSE(parse_endpoint("node\n0:80", ep, &err));
    CHECK_THAT(err, Catch::StartsWith("'node\\n0:80': "));
}

TEST_CASE("parse_endpoint: connect and the collector setting need a port of 1..65535 and a real host") {
    for (auto kind : {EndpointKind::Connect, EndpointKind::Collector}) {
        Endpoint ep;
        std::string err;
        CHECK_FALSE(parse_endpoint("node0:0", ep, &err, kind));
        CHECK_THAT(err, Catch::Contains("the port 0 is not in 1..65535"));
        CHECK_FALSE(parse_endpoint("127.0.0.1:99999", ep, &err, kind));
        CHECK_THAT(err, Catch::Contains("the port 99999 is not in 1..65535"));
        CHECK_FALSE(parse_endpoint(":80", ep, &err, kind));
        CHECK_THAT(err, Catch::Contains("': no host before ':' ("));
        CHECK_FALSE(parse_endpoint("*:80", ep, &err, kind));
        CHECK_THAT(err, Catch::Contains("'*' (every address) is for listening only"));
    }
    Endpoint ep;
    std::string err;
    CHECK_FALSE(parse_endpoint("auto", ep, &err, EndpointKind::Connect));
    CHECK_THAT(err, Catch::Contains("'auto': no port after the host (expected HOST:PORT or [IPv6]:PORT, the port "
                                    "1..65535)"));
}

TEST_CASE("parse_endpoint: the collector setting also takes auto, which leaves the address to the caller") {
    Endpoint ep{"x", 9};
    std::string err;
    REQUIRE(parse_endpoint("auto", ep, &err, EndpointKind::Collector));
    CHECK(ep.host.empty());
    CHECK(ep.port == 0);
    CHECK_FALSE(parse_endpoint("AUTO", ep, &err, EndpointKind::Collector));
    CHECK(err == "'AUTO': no port after the host (expected auto, HOST:PORT or [IPv6]:PORT, the port 1..65535)");
}

TEST_CASE("parse_endpoint: a listening address also takes port 0 (any free one) and * (every address)") {
    Endpoint ep;
    std::string err;
    REQUIRE(parse_endpoint("127.0.0.1:0", ep, &err, EndpointKind::Listen));
    CHECK(ep.port == 0);
    REQUIRE(parse_endpoint("*:29610", ep, &err, EndpointKind::Listen));
    CHECK(ep.host == "*");
    CHECK(ep.port == 29610);
    REQUIRE(parse_endpoint("[::]:0", ep, &err, EndpointKind::Listen));
    CHECK(ep.host == "::");
    REQUIRE(parse_endpoint("0.0.0.0:29611", ep, &err, EndpointKind::Listen));
    // Not an empty host: "*" says every address (serve never took ":PORT").
    CHECK_FALSE(parse_endpoint(":29610", ep, &err, EndpointKind::Listen));
    CHECK(err ==
          "':29610': no host before ':' (*:PORT listens on every address) (expected HOST:PORT, [IPv6]:PORT or *:PORT, "
          "the port 0..65535, 0 for any free one)");
    CHECK_FALSE(parse_endpoint("127.0.0.1:99999", ep, &err, EndpointKind::Listen));
    CHECK_THAT(err, Catch::StartsWith("'127.0.0.1:99999': the port 99999 is not in 0..65535 (expected"));
    CHECK_FALSE(parse_endpoint("127.0.0.1:65536", ep, &err, EndpointKind::Listen));  // no wrap to port 0
    CHECK_FALSE(parse_endpoint("**:80", ep, &err, EndpointKind::Listen));
    CHECK_THAT(err, Catch::Contains("the host '**' is not a host name or an address"));
}

TEST_CASE("format_endpoint writes what parse_endpoint reads back") {
    for (const Endpoint& ep : {Endpoint{"node0", 29610}, Endpoint{"::1", 1}, Endpoint{"fe80::1%eth0", 80},
                               Endpoint{"10.0.0.1", 65535}, Endpoint{"*", 0}}) {
        const std::string s = format_endpoint(ep);
        INFO(s);
        Endpoint back;
        REQUIRE(parse_endpoint(s, back, nullptr, EndpointKind::Listen));
        CHECK(back.host == ep.host);
        CHECK(back.port == ep.port);
    }
    CHECK(format_endpoint({"::1", 29610}) == "[::1]:29610");
    CHECK(format_endpoint({"node0", 29610}) == "node0:29610");
}

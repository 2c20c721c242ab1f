// The collector's listening sockets (live/net.h): listen_on reads its address with read/endpoint.h's parser (Listen
// rules), so a port past 65535 is refused rather than wrapped onto another port, and garbage is named as such.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "live/net.h"

using namespace ncw;

TEST_CASE("listen_on refuses what the parser refuses, in its one line, and binds nothing") {
    for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "nonsense", "host:", ":29610",
                            "127.0.0.1:18446744073709551617", "::1:0"}) {
        INFO(bad);
        uint16_t port = 7;
        std::string err;
        CHECK(live::listen_on(bad, port, &err) == -1);
        CHECK(port == 7);
        CHECK_THAT(err, Catch::StartsWith(std::string("cannot listen on '") + bad + "': "));
        CHECK_THAT(err, Catch::EndsWith(std::string("(expected ") + endpoint_forms(EndpointKind::Listen) + ")"));
        CHECK(err.find('\n') == std::string::npos);
    }
    std::string err;
    uint16_t port = 0;
    CHECK(live::listen_on("127.0.0.1:99999", port, &err) == -1);
    CHECK_THAT(err, Catch::Contains("the port 99999 is not in 0..65535"));
}

TEST_CASE("listen_on binds port 0 as any free port, and *:0 on every IPv4 address") {
    for (const char* addr : {"127.0.0.1:0", "*:0", "localhost:0"}) {
        INFO(addr);
        uint16_t port = 0;
        std::string err;
        const int fd = live::listen_on(addr, port, &err);
        REQUIRE(fd >= 0);
        CHECK(err.empty());
        CHECK(port != 0);
        close(fd);
    }
}

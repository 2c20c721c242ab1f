// HOST:PORT, the one parser of a collector's address: `serve --listen` and `--metrics`, the shim's
// NCCLWATCH_COLLECTOR and the launcher all take an address in these words.
#pragma once

#include <cstdint>
#include <string>

namespace ncw {

struct Endpoint {
    std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
    uint16_t port = 0;
};

// "host:port" or "[v6addr]:port", the port in 1..65535. false with *err naming what is wrong.
bool parse_endpoint(const std::string& s, Endpoint& out, std::string* err);

}  // namespace ncw

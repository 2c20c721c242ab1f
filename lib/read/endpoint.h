// HOST:PORT, the one parser of a collector's address: `serve --listen` and `--metrics`, `relay --listen` and `--to`,
// the live server's and the relay's listening sockets (live/net.h), the shim's NCCLWATCH_COLLECTOR and, in the same
// rules and words, the launcher's `ncclwatch run --collector` (python/ncclwatch/_cli.py parse_endpoint).
#pragma once

#include <cstdint>
#include <string>

namespace ncw {

struct Endpoint {
    std::string host;  // a name, an IPv4 address, an IPv6 address without brackets, or "*" (Listen: every address)
    uint16_t port = 0;
};

// What an address is for; the rules differ only in what each allows beyond HOST:PORT with a port in 1..65535.
enum class EndpointKind {
    Connect,    // a collector to reach: HOST:PORT or [IPv6]:PORT, the port 1..65535
    Collector,  // NCCLWATCH_COLLECTOR and `ncclwatch run --collector`: the same, or "auto" (out is then left empty:
                // the caller derives it from MASTER_ADDR)
    Listen,     // an address to listen on: also *:PORT (every IPv4 address), and port 0 (any free one)
};

// Parses `s` by the rules of `kind`: a host (a name of letters, digits, '.', '-' and '_', at most 253 characters;
// an IPv4 address when it is all digits and dots; an IPv6 address only in brackets, "[::1]:PORT"), then ':' and a
// port of decimal digits in range (no sign, no spaces). false with *err one line that names the value and what is
// wrong, then the forms accepted: "'127.0.0.1:99999': the port 99999 is not in 1..65535 (expected HOST:PORT or
// [IPv6]:PORT, the port 1..65535)".
bool parse_endpoint(const std::string& s, Endpoint& out, std::string* err, EndpointKind kind = EndpointKind::Connect);

// The forms `kind` accepts, in the words of parse_endpoint's errors ("HOST:PORT or [IPv6]:PORT, the port 1..65535").
const char* endpoint_forms(EndpointKind kind);

// "host:port", "[v6]:port" or "*:port": an Endpoint as parse_endpoint reads it back.
std::string format_endpoint(const Endpoint& ep);

}  // namespace ncw

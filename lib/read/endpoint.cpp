// HOST:PORT, the one parser of a collector's address (see endpoint.h). python/ncclwatch/_cli.py parse_endpoint keeps
// the same rules in the same words: a change here is a change there (test/e2e/endpoints.sh compares them).
#include "read/endpoint.h"

#include <arpa/inet.h>

#include <string_view>

#include "read/redact.h"
#include "read/text.h"

namespace ncw {

namespace {

constexpr size_t kMaxHost = 253;  // a DNS name's longest text form
constexpr size_t kEcho = 64;      // how much of a part of the value an error repeats

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_';
}

std::string quoted(std::string_view part) { return "'" + text::echo(redact::value(part), kEcho) + "'"; }

// What is wrong with an IPv6 address given in brackets (without them), "" when nothing: an address inet_pton reads,
// optionally a zone ("fe80::1%eth0").
std::string v6_problem(const std::string& host) {
    if (host.empty()) return "no host between '[' and ']'";
    const size_t pct = host.find('%');
    const std::string addr = host.substr(0, pct);
    in6_addr a6{};
    bool ok = inet_pton(AF_INET6, addr.c_str(), &a6) == 1;
    if (ok && pct != std::string::npos) {
        const std::string zone = host.substr(pct + 1);
        ok = !zone.empty() && zone.size() <= 64;
        for (char c : zone) ok = ok && name_char(c);
    }
    return ok ? "" : "the host " + quoted(host) + " is not an IPv6 address";
}

// What is wrong with a host given without brackets, "" when nothing.
std::string host_problem(const std::string& host, EndpointKind kind) {
    if (host.empty())
        return kind == EndpointKind::Listen ? "no host before ':' (*:PORT listens on every address)"
                                            : "no host before ':'";
    if (host == "*") return kind == EndpointKind::Listen ? "" : "'*' (every address) is for listening only";
    if (host.find(':') != std::string::npos) return "an IPv6 address needs brackets, as [::1]:PORT";
    if (host.size() > kMaxHost) return "the host is longer than 253 characters";
    bool dotted = true;
    for (char c : host) {
        if (!name_char(c)) return "the host " + quoted(host) + " is not a host name or an address";
        dotted = dotted && ((c >= '0' && c <= '9') || c == '.');
    }
    if (dotted) {
        in_addr a4{};
        return inet_pton(AF_INET, host.c_str(), &a4) == 1 ? "" : "the host " + quoted(host) + " is not an IPv4 address";
    }
    if (host[0] == '.' || host[0] == '-' || host.find("..") != std::string::npos)
        return "the host " + quoted(host) + " is not a host name or an address";
    return "";
}

// What is wrong with the port's text, "" when nothing (its value in *port).
std::string port_problem(const std::string& text, EndpointKind kind, uint16_t* port) {
    if (text.empty()) return "no port after ':'";
    unsigned long v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return "the port " + quoted(text) + " is not a number";
        v = v > 65535 ? v : v * 10 + unsigned(c - '0');  // stops growing past the range: no overflow
    }
    const unsigned long lowest = kind == EndpointKind::Listen ? 0 : 1;
    if (v < lowest || v > 65535)
        return "the port " + text::echo(text, kEcho) + " is not in " + (lowest ? "1" : "0") + "..65535";
    *port = uint16_t(v);
    return "";
}

}  // namespace

const char* endpoint_forms(EndpointKind kind) {
    switch (kind) {
        case EndpointKind::Connect: return "HOST:PORT or [IPv6]:PORT, the port 1..65535";
        case EndpointKind::Collector: return "auto, HOST:PORT or [IPv6]:PORT, the port 1..65535";
        case EndpointKind::Listen: return "HOST:PORT, [IPv6]:PORT or *:PORT, the port 0..65535, 0 for any free one";
    }
    return "";
}

bool parse_endpoint(const std::string& s, Endpoint& out, std::string* err, EndpointKind kind) {
    auto fail = [&](const std::string& why) {
        if (err) *err = quoted(s) + ": " + why + " (expected " + endpoint_forms(kind) + ")";
        return false;
    };
    if (kind == EndpointKind::Collector && s == "auto") {
        out = Endpoint{};
        return true;
    }
    if (s.empty()) return fail("empty");
    std::string host, port, problem;
    if (s[0] == '[') {
        const size_t close = s.find(']');
        if (close == std::string::npos) return fail("no closing ']'");
        host = s.substr(1, close - 1);
        if (close + 1 >= s.size() || s[close + 1] != ':') return fail("no ':PORT' after ']'");
        port = s.substr(close + 2);
        problem = v6_problem(host);
    } else {
        const size_t colon = s.rfind(':');
        if (colon == std::string::npos) return fail("no port after the host");
        host = s.substr(0, colon);
        port = s.substr(colon + 1);
        problem = host_problem(host, kind);
    }
    if (!problem.empty()) return fail(problem);
    uint16_t p = 0;
    if (problem = port_problem(port, kind, &p); !problem.empty()) return fail(problem);
    out.host = host;
    out.port = p;
    return true;
}

std::string format_endpoint(const Endpoint& ep) {
    const bool v6 = ep.host.find(':') != std::string::npos;
    return (v6 ? "[" + ep.host + "]" : ep.host) + ":" + std::to_string(ep.port);
}

}  // namespace ncw

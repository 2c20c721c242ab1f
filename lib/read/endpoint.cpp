#include "read/endpoint.h"

#include <cstdlib>

#include "read/text.h"

namespace ncw {

bool parse_endpoint(const std::string& s, Endpoint& out, std::string* err) {
    auto fail = [&](const std::string& why) {
        if (err) *err = "'" + text::echo(s) + "': " + why + " (expected HOST:PORT, [IPv6]:PORT or auto)";
        return false;
    };
    std::string host, port;
    if (!s.empty() && s[0] == '[') {
        const size_t close = s.find(']');
        if (close == std::string::npos) return fail("no closing ']'");
        host = s.substr(1, close - 1);
        if (close + 1 >= s.size() || s[close + 1] != ':') return fail("no ':PORT' after ']'");
        port = s.substr(close + 2);
    } else {
        const size_t colon = s.rfind(':');
        if (colon == std::string::npos) return fail("no port");
        host = s.substr(0, colon);
        if (host.find(':') != std::string::npos) return fail("an IPv6 address needs brackets");
        port = s.substr(colon + 1);
    }
    if (host.empty()) return fail("no host");
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
        return fail("the port is not a number");
    const long p = strtol(port.c_str(), nullptr, 10);
    if (p < 1 || p > 65535) return fail("the port is not in 1..65535");
    out.host = host;
    out.port = uint16_t(p);
    return true;
}

}  // namespace ncw

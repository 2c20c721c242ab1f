#include "read/redact.h"

#include <cctype>

namespace ncw::redact {
namespace {

bool is_key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; }

// Where a key's value ends in a query string or an option list.
constexpr std::string_view kValueEnd = "&;, \t\r\n\"'";
// What bounds a URL's user information on the left: a token of a list, a path, an assignment, a quote.
constexpr std::string_view kTokenEdge = " \t\r\n,;/?&=\"'<>()[]{}|";

// ?token=..., ;password=..., --api-key=..., "passwd: ...": the value of a secret key.
std::string redact_keys(std::string s) {
    for (size_t i = 0; i < s.size(); ++i) {
        const bool assign = s[i] == '=';
        const bool colon = s[i] == ':' && i + 1 < s.size() && s[i + 1] == ' ';
        if (!assign && !colon) continue;
        size_t k = i;
        while (k > 0 && is_key_char(s[k - 1])) --k;
        if (k == i || !is_secret_name(std::string_view(s).substr(k, i - k))) continue;
        size_t from = i + 1;
        while (colon && from < s.size() && s[from] == ' ') ++from;
        size_t to = s.find_first_of(kValueEnd, from);
        if (to == std::string::npos) to = s.size();
        if (to == from || std::string_view(s).substr(from, to - from) == kRedacted) continue;
        s.replace(from, to - from, kRedacted);
        i = from + kRedacted.size() - 1;
    }
    return s;
}

// user:password@host, with or without scheme://: the password, from the first ':' of the token to its last '@'.
std::string redact_userinfo(std::string s) {
    for (size_t start = 0; start < s.size();) {
        size_t end = s.find_first_of(kTokenEdge, start);
        if (end == std::string::npos) end = s.size();
        const size_t at = s.rfind('@', end - 1);
        if (end > start && at != std::string::npos && at >= start) {
            const size_t colon = s.find(':', start);
            if (colon < at && std::string_view(s).substr(colon + 1, at - colon - 1) != kRedacted) {
                s.replace(colon + 1, at - colon - 1, kRedacted);
                end = s.find_first_of(kTokenEdge, start);
                if (end == std::string::npos) end = s.size();
            }
        }
        start = end + 1;
    }
    return s;
}

}  // namespace

bool is_secret_name(std::string_view name) {
    std::string up(name);
    for (auto& c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
    for (const char* w : {"PASS", "PWD", "PSK", "TOKEN", "SECRET", "KEY", "AUTH", "CRED", "COOKIE"})
        if (up.find(w) != std::string::npos) return true;
    return false;
}

std::string value(std::string_view v) { return redact_userinfo(redact_keys(std::string(v))); }

std::string env_value(std::string_view name, std::string_view v) {
    return is_secret_name(name) ? std::string(kRedacted) : value(v);
}

std::string env_entry(std::string_view entry) {
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return std::string(entry);
    return std::string(entry.substr(0, eq + 1)) + env_value(entry.substr(0, eq), entry.substr(eq + 1));
}

}  // namespace ncw::redact

#include "live/http_request.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

namespace ncw::live {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

bool iequal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

}  // namespace

bool accepts_openmetrics(std::string_view accept) {
    double q_om = 0, q_text = 0;
    while (!accept.empty()) {
        const size_t comma = accept.find(',');
        std::string_view range = accept.substr(0, comma);
        accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
        // type/subtype *(; name=value)
        const size_t semi = range.find(';');
        const std::string_view type = trim(range.substr(0, semi));
        double q = 1;
        std::string_view version;
        for (std::string_view params = semi == std::string_view::npos ? std::string_view() : range.substr(semi + 1);
             !params.empty();) {
            const size_t next = params.find(';');
            const std::string_view p = trim(params.substr(0, next));
            params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
            const size_t eq = p.find('=');
            if (eq == std::string_view::npos) continue;
            const std::string_view name = trim(p.substr(0, eq)), value = trim(p.substr(eq + 1));
            if (iequal(name, "q")) {
                const std::string v(value.substr(0, 8));
                char* end = nullptr;
                q = std::strtod(v.c_str(), &end);
                if (end == v.c_str() || !(q >= 0 && q <= 1)) q = 0;
            } else if (iequal(name, "version")) {
                version = value;
            }
        }
        if (iequal(type, "application/openmetrics-text")) {
            if (version.empty() || version == "1.0.0") q_om = std::max(q_om, q);
        } else if (iequal(type, "text/plain") || iequal(type, "text/*") || type == "*/*") {
            q_text = std::max(q_text, q);
        }
    }
    return q_om > 0 && q_om >= q_text;
}

HttpRequest parse_http_request(std::string_view bytes, size_t max_head) {
    HttpRequest r;
    // The first blank line: "\r\n\r\n" or "\n\n", whichever ends first.
    size_t end = std::string_view::npos;
    const size_t crlf = bytes.find("\r\n\r\n");
    if (crlf != std::string_view::npos) end = crlf + 4;
    const size_t lf = bytes.find("\n\n");
    if (lf != std::string_view::npos) end = std::min(end, lf + 2);
    if (end == std::string_view::npos || end > max_head) {
        r.status = bytes.size() > max_head ? HttpRequest::Status::TooLarge : HttpRequest::Status::NeedMore;
        return r;
    }
    r.status = HttpRequest::Status::Complete;
    r.head_bytes = end;
    const std::string_view line = bytes.substr(0, std::min(bytes.find_first_of("\r\n"), end));
    // METHOD SP TARGET [SP VERSION]: HTTP/0.9's "GET /metrics" too.
    const size_t sp = line.find(' ');
    r.method = line.substr(0, sp);
    if (sp != std::string_view::npos) {
        const std::string_view rest = line.substr(sp + 1);
        r.target = rest.substr(0, rest.find(' '));
    }
    const std::string_view path = r.target.substr(0, r.target.find('?'));
    r.route = r.method == "GET" && path == "/metrics" ? HttpRequest::Route::Metrics : HttpRequest::Route::NotFound;
    // The header lines after the request line: every Accept, joined.
    std::string accept;
    for (size_t at = line.size(); at < end;) {
        const size_t eol = bytes.find('\n', at);
        if (eol == std::string_view::npos || eol >= end) break;
        const std::string_view h = bytes.substr(at, eol - at);
        at = eol + 1;
        const size_t colon = h.find(':');
        if (colon == std::string_view::npos || !iequal(trim(h.substr(0, colon)), "accept")) continue;
        if (!accept.empty()) accept += ',';
        accept.append(trim(h.substr(colon + 1)));
    }
    r.openmetrics = accepts_openmetrics(accept);
    return r;
}

}  // namespace ncw::live

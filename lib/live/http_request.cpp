#include "live/http_request.h"

#include <algorithm>

namespace ncw::live {

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
    return r;
}

}  // namespace ncw::live

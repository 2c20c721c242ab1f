// The live collector's HTTP side reads one request per connection: its request line, up to the blank line that ends
// the headers, within a byte cap. This is that parse as a pure function over the bytes received so far (no socket),
// so that it can be fuzzed (test/fuzz/fuzz_http.cpp) and tested alone; live_server.cpp calls it as bytes arrive.
#pragma once

#include <cstddef>
#include <string_view>

namespace ncw::live {

struct HttpRequest {
    enum class Status {
        NeedMore,  // no blank line yet, and under the cap
        TooLarge,  // the cap passed without a blank line: answer 431 and close
        Complete,  // the head is in: answer by route and close (HTTP/1.0, one request per connection)
    };
    enum class Route {
        None,      // not Complete
        Metrics,   // GET /metrics (a query string allowed)
        NotFound,  // anything else
    };
    Status status = Status::NeedMore;
    Route route = Route::None;
    std::string_view method;  // Complete: views into the bytes given
    std::string_view target;
    size_t head_bytes = 0;  // Complete: bytes up to and including the blank line
    // Complete: the Accept headers prefer OpenMetrics 1.0.0 (application/openmetrics-text, version 1.0.0 or none,
    // with a q at least that of text/plain): the scraper gets it; otherwise Prometheus text.
    bool openmetrics = false;
};

// Whether an Accept header's value (several headers joined by ',') prefers OpenMetrics 1.0.0 text to Prometheus
// text, by q-value; a tie goes to OpenMetrics, */* and text/* count for Prometheus text only.
bool accepts_openmetrics(std::string_view accept);

// `bytes`: everything received on the connection so far. A head (request line, headers, blank line: CRLF CRLF or
// LF LF) longer than `max_head` is TooLarge. Never reads past bytes.size().
HttpRequest parse_http_request(std::string_view bytes, size_t max_head);

}  // namespace ncw::live

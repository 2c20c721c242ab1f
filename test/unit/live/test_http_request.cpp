// The live collector's HTTP request parse (lib/live/http_request.h), a pure function: fuzzed by
// test/fuzz/fuzz_http.cpp, its answers pinned here. live_server's /metrics tests drive it through sockets.
#include <catch2/catch.hpp>
#include <string>

#include "live/http_request.h"

using ncw::live::HttpRequest;
using ncw::live::parse_http_request;
using S = HttpRequest::Status;
using R = HttpRequest::Route;

TEST_CASE("a scraper's GET /metrics is complete at the blank line, read in one piece or byte by byte") {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: node0:9400\r\nAccept: */*\r\n\r\n";
    const HttpRequest r = parse_http_request(req, 8192);
    CHECK(r.status == S::Complete);
    CHECK(r.route == R::Metrics);
    CHECK(r.method == "GET");
    CHECK(r.target == "/metrics");
    CHECK(r.head_bytes == req.size());
    for (size_t n = 0; n < req.size(); ++n) {
        INFO("first " << n << " bytes");
        const HttpRequest part = parse_http_request(std::string(req, 0, n), 8192);
        CHECK(part.status == S::NeedMore);
        CHECK(part.route == R::None);
    }
    // Bytes after the head (a body, a pipelined request) change nothing.
    CHECK(parse_http_request(req + "GET / HTTP/1.1\r\n\r\n", 8192).head_bytes == req.size());
}

TEST_CASE("routes: GET /metrics with or without a query, HTTP/0.9 or LF-only; everything else is not found") {
    CHECK(parse_http_request("GET /metrics?x=1 HTTP/1.0\r\n\r\n", 8192).route == R::Metrics);
    CHECK(parse_http_request("GET /metrics\r\n\r\n", 8192).route == R::Metrics);
    CHECK(parse_http_request("GET /metrics HTTP/1.0\n\n", 8192).route == R::Metrics);
    for (const char* other :
         {"GET / HTTP/1.1\r\n\r\n", "POST /metrics HTTP/1.0\r\n\r\n", "GET /metricsX HTTP/1.0\r\n\r\n",
          "get /metrics HTTP/1.0\r\n\r\n", "GET\r\n\r\n", "\r\n\r\n", "\n\n", " /metrics\n\n"}) {
        INFO(other);
        const HttpRequest r = parse_http_request(other, 8192);
        CHECK(r.status == S::Complete);
        CHECK(r.route == R::NotFound);
    }
}

TEST_CASE("a head past the cap is TooLarge, one byte past it and no sooner") {
    const std::string head = "GET /metrics HTTP/1.0\r\nX: " + std::string(100, 'a') + "\r\n\r\n";
    CHECK(parse_http_request(head, head.size()).status == S::Complete);
    CHECK(parse_http_request(head, head.size() - 1).status == S::TooLarge);
    const std::string open = "GET /metrics HTTP/1.0\r\nX: " + std::string(100, 'a');
    CHECK(parse_http_request(open, open.size()).status == S::NeedMore);
    CHECK(parse_http_request(open + "a", open.size()).status == S::TooLarge);
    // NUL bytes and binary are just bytes.
    const std::string bin("GET /metrics\0\xff HTTP/1.0\r\n\r\n", 27);
    CHECK(parse_http_request(bin, 8192).route == R::NotFound);
}

TEST_CASE("Accept: OpenMetrics 1.0.0 when the scraper prefers it, Prometheus text otherwise") {
    using ncw::live::accepts_openmetrics;
    // Prometheus 2.x's own header, and 3.x's.
    CHECK(
        accepts_openmetrics("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                            "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
    CHECK(accepts_openmetrics("application/openmetrics-text; version=1.0.0; charset=utf-8"));
    CHECK(accepts_openmetrics("APPLICATION/OpenMetrics-Text"));
    CHECK(!accepts_openmetrics(""));
    CHECK(!accepts_openmetrics("*/*"));
    CHECK(!accepts_openmetrics("text/plain;version=0.0.4"));
    CHECK(!accepts_openmetrics("application/openmetrics-text;version=0.0.1"));  // we write 1.0.0 only
    CHECK(!accepts_openmetrics("application/openmetrics-text;q=0.2,text/plain;q=0.9"));
    CHECK(!accepts_openmetrics("application/openmetrics-text;q=0"));
    CHECK(!accepts_openmetrics("application/openmetrics-text;q=x"));
    CHECK(accepts_openmetrics("text/plain;q=0.5, application/openmetrics-text;version=1.0.0"));

    const auto om = [](const std::string& headers) {
        return parse_http_request("GET /metrics HTTP/1.1\r\n" + headers + "\r\n", 8192).openmetrics;
    };
    CHECK(om("Accept: application/openmetrics-text;version=1.0.0\r\n"));
    CHECK(om("accept:application/openmetrics-text\r\n"));
    CHECK(om("Host: x\r\nAccept: text/plain;q=0.1\r\nAccept: application/openmetrics-text\r\n"));
    CHECK(!om("Host: x\r\nAccept: */*\r\n"));
    CHECK(!om(""));
    CHECK(!om("X-Accept: application/openmetrics-text\r\n"));
    CHECK(parse_http_request("GET /metrics HTTP/1.0\nAccept: application/openmetrics-text\n\n", 8192).openmetrics);
}

// libFuzzer target: the live collector's HTTP request parse (lib/live/http_request.h), fed as live_server.cpp feeds it:
// the bytes received so far, growing read by read, held to one byte past the cap. Whatever the bytes, the parse
// reads nothing past them, its views lie inside them, and its answer is the one the whole request gets: once the head
// is complete, more bytes change nothing; TooLarge only past the cap.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "live/http_request.h"

namespace {

using ncw::live::HttpRequest;
using ncw::live::parse_http_request;

bool inside(std::string_view part, std::string_view whole) {
    return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void check(const HttpRequest& r, std::string_view bytes, size_t cap) {
    if (!inside(r.method, bytes) || !inside(r.target, bytes)) abort();
    switch (r.status) {
        case HttpRequest::Status::NeedMore:
            if (r.route != HttpRequest::Route::None || bytes.size() > cap) abort();
            break;
        case HttpRequest::Status::TooLarge:
            if (r.route != HttpRequest::Route::None || bytes.size() <= cap) abort();
            break;
        case HttpRequest::Status::Complete:
            if (r.route == HttpRequest::Route::None || r.head_bytes == 0 || r.head_bytes > std::min(cap, bytes.size()))
                abort();
            if (r.route == HttpRequest::Route::Metrics && (r.method != "GET" || r.target.substr(0, 8) != "/metrics"))
                abort();
            break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    // First byte: the cap (small ones reach TooLarge quickly; 0 means the collector's 8 KiB); second: how the rest
    // is cut into reads (1..16).
    const size_t cap = data[0] ? size_t(data[0]) * 4 : 8 * 1024;
    const size_t chunks = 1 + (data[1] & 15);
    const std::string_view in(reinterpret_cast<const char*>(data + 2), size - 2);

    std::string held;  // a connection's http_in
    const size_t step = in.size() / chunks + 1;
    bool answered = false;
    HttpRequest first;
    for (size_t off = 0; off < in.size() && !answered; off += step) {
        const std::string_view read = in.substr(off, step);
        held.append(read.data(), std::min(read.size(), cap + 1 - held.size()));
        // A copy of exactly the bytes held, so that AddressSanitizer sees a read past them.
        const std::string exact(held);
        const HttpRequest r = parse_http_request(exact, cap);
        check(r, exact, cap);
        if (r.status != HttpRequest::Status::NeedMore) {
            answered = true;
            first = r;
        }
    }
    // The same bytes in one read, uncut: the same answer.
    const std::string all(in.substr(0, std::min(in.size(), cap + 1)));
    const HttpRequest whole = parse_http_request(all, cap);
    check(whole, all, cap);
    if (answered &&
        (whole.status != first.status || whole.route != first.route || whole.head_bytes != first.head_bytes))
        abort();
    return 0;
}

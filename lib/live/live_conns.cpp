// The live collector's connections and frames: accept, read, write, the frame dispatch, HTTP /metrics requests.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "live/http_request.h"
#include "live/live_impl.h"
#include "ncclwatch/format.h"
#include "report/report_json.h"

namespace ncw::live {

using report::clean;

namespace {

bool split_host_port(const std::string& s, std::string& host, std::string& port) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos || colon + 1 >= s.size()) return false;
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "*") host = "0.0.0.0";
    return !host.empty();
}

std::string peer_name(const sockaddr_storage& ss, std::string& ip) {
    char buf[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        port = ntohs(a->sin6_port);
    }
    ip = buf;
    return ip + ":" + std::to_string(port);
}

}  // namespace

int listen_on(const std::string& addr, uint16_t& port_out, std::string* err) {
    std::string host, port;
    if (!split_host_port(addr, host, port)) {
        if (err) *err = "'" + addr + "' is not HOST:PORT";
        return -1;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
        if (err) *err = "cannot resolve '" + addr + "': " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    std::string last = "no address";
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last = strerror(errno);
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
        last = strerror(errno);
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (err) *err = "cannot listen on " + addr + ": " + last;
        return -1;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    port_out = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
}

void LiveServer::Impl::log(const std::string& line) {
    try {
        if (opt.log)
            opt.log(line);
        else
            fprintf(stderr, "ncclwatch-collector: %s\n", line.c_str());
    } catch (...) {
    }
}

void LiveServer::Impl::set_events(Conn& c, bool want_out) {
    if (c.want_out == want_out) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_out = want_out;
}

void LiveServer::Impl::close_conn(uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (c.job && c.rank < c.job->ranks.size() && c.job->ranks[c.rank].conn_id == c.id) {
        c.job->ranks[c.rank].conn_id = 0;
        c.job->dirty = true;
    }
    epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    buffered_total -= std::min(buffered_total, c.buffered + c.pending_bytes);
    st_buffered = buffered_total;
    if (!c.http) --rank_conns;
    conns.erase(it);
    st_connections = rank_conns;
}

void LiveServer::Impl::bad(Conn& c, const char* cause, const std::string& reason) {
    ++st_bad;
    log_peer(c, cause, reason);
    close_conn(c.id);
}

// Returns false when the connection was closed. The queued bytes go first, then the streamed body (/metrics), as
// much as the socket takes each time it drains.
bool LiveServer::Impl::flush(Conn& c) {
    for (;;) {
        const bool head = c.out_pos < c.out.size();
        if (!head && (!c.body || c.body_pos >= c.body->size())) break;
        const uint8_t* p =
            head ? c.out.data() + c.out_pos : reinterpret_cast<const uint8_t*>(c.body->data()) + c.body_pos;
        const size_t len = head ? c.out.size() - c.out_pos : c.body->size() - c.body_pos;
        const ssize_t n = send(c.fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            (head ? c.out_pos : c.body_pos) += size_t(n);
            c.out_progress_ns = mono_ns();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        close_conn(c.id);
        return false;
    }
    if (c.body && c.body_pos >= c.body->size()) c.body.reset();  // the shared rendering is not held past its use
    if (c.out_pos == c.out.size() && !c.body) {
        c.out.clear();
        c.out_pos = 0;
        if (c.close_after_flush) {
            close_conn(c.id);
            return false;
        }
        set_events(c, false);
    } else {
        if (c.out_pos > (1u << 20)) {
            c.out.erase(c.out.begin(), c.out.begin() + ptrdiff_t(c.out_pos));
            c.out_pos = 0;
        }
        set_events(c, true);
    }
    return true;
}

bool LiveServer::Impl::queue(Conn& c, const std::vector<uint8_t>& bytes) {
    if (!c.http && c.out.size() - c.out_pos + bytes.size() > kMaxOutBuffer) {
        log_peer(c, "not reading", "not reading what the collector sends (output buffer full)");
        close_conn(c.id);
        return false;
    }
    c.out.insert(c.out.end(), bytes.begin(), bytes.end());
    return flush(c);
}

void LiveServer::Impl::accept_all(int lfd, bool http) {
    for (int i = 0; i < 1024; ++i) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = accept4(lfd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                // Level-triggered epoll would spin on the pending connection: take it with the spare descriptor
                // and drop it.
                ++st_refused;
                if (spare_fd >= 0) {
                    close(spare_fd);
                    const int dropped = accept(lfd, nullptr, nullptr);
                    if (dropped >= 0) close(dropped);
                    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                static bool said = false;
                if (!said) log("out of file descriptors: refusing connections (raise RLIMIT_NOFILE)");
                said = true;
            }
            return;
        }
        if (conns.size() >= opt.max_connections) {
            ++st_refused;
            close(fd);
            continue;
        }
        auto c = std::make_unique<Conn>();
        c->id = next_conn_id++;
        c->fd = fd;
        c->http = http;
        c->opened_ns = mono_ns();
        c->peer = peer_name(ss, c->ip);
        if (!http) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = c->id;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            continue;
        }
        if (!http) ++rank_conns;
        conns.emplace(c->id, std::move(c));
        st_connections = rank_conns;
    }
}

void LiveServer::Impl::on_readable(Conn& c) {
    uint8_t buf[kReadChunk];
    const uint64_t id = c.id;
    const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(id);
        return;
    }
    if (n < 0) return;
    if (c.close_after_flush) return;  // refused: what it still sends is ignored
    if (c.http) {
        on_http(c, buf, size_t(n));
        return;
    }
    c.reader.feed(buf, size_t(n));
    wire::FrameHeader h;
    std::string err;
    bool completed = false;
    while (conns.count(id) && !c.close_after_flush) {
        const auto s = c.reader.next(h, scratch, &err);
        if (s == wire::FrameReader::Status::NeedMore) break;
        if (s == wire::FrameReader::Status::Error) {
            const char* cause = err.rfind("bad magic", 0) == 0                       ? "bad magic"
                                : err.find("exceeds the limit") != std::string::npos ? "oversize"
                                                                                     : "malformed";
            bad(c, cause, err.empty() ? "malformed frame" : err);
            return;
        }
        ++st_frames;
        completed = true;
        if (!on_frame(c, h)) return;
    }
    if (conns.count(id)) account(c, mono_ns(), completed);
}

// false: the connection was closed (or is closing).
bool LiveServer::Impl::on_frame(Conn& c, const wire::FrameHeader& h) {
    const uint64_t now = mono_ns();
    std::string err;
    const auto type = wire::FrameType(h.type);
    if (c.pending && type != wire::FrameType::Proof) {
        bad(c, "protocol", fmt::format("frame type {} before the token proof", h.type));
        return false;
    }
    if (!c.hello && !c.pending && type != wire::FrameType::Hello) {
        bad(c, "protocol", fmt::format("first frame is type {}, not Hello", h.type));
        return false;
    }
    switch (type) {
        case wire::FrameType::Hello: {
            if (c.hello) {
                bad(c, "protocol", "second Hello on one connection");
                return false;
            }
            wire::Hello m;
            if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                bad(c, "malformed", "bad Hello: " + err);
                return false;
            }
            return on_hello(c, h, m, now);
        }
        case wire::FrameType::Proof: {
            if (!c.pending) {
                bad(c, "protocol", "a Proof without a Challenge");
                return false;
            }
            wire::Proof m;
            if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                bad(c, "malformed", "bad Proof: " + err);
                return false;
            }
            return on_proof(c, m, now);
        }
        case wire::FrameType::Digest: {
            wire::Digest m;
            if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                bad(c, "malformed", "bad Digest: " + err);
                return false;
            }
            on_digest(c, m, now);
            return true;
        }
        case wire::FrameType::KeepAlive: {
            wire::KeepAlive m;
            if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                bad(c, "malformed", "bad KeepAlive: " + err);
                return false;
            }
            RankState& r = c.job->ranks[c.rank];
            r.last_frame_ns = now;
            if (m.sent_mono_ns) r.clock.add(int64_t(now - m.sent_mono_ns));
            return true;
        }
        case wire::FrameType::Bye: {
            RankState& r = c.job->ranks[c.rank];
            r.last_frame_ns = now;
            r.bye = true;
            c.job->snaps[c.rank].header.process_state = uint32_t(disk::ProcessState::ExitedClean);
            c.job->dirty = true;
            return true;
        }
        case wire::FrameType::HelloAck:
        case wire::FrameType::Challenge:
        case wire::FrameType::Reject:
        case wire::FrameType::DumpRequest:
            bad(c, "protocol", fmt::format("frame type {} goes from the collector to ranks, not back", h.type));
            return false;
    }
    return true;  // a type a newer minor added: skipped
}

void LiveServer::Impl::on_http(Conn& c, const uint8_t* p, size_t n) {
    // Held up to one byte past the cap: enough to tell TooLarge, never more.
    c.http_in.append(reinterpret_cast<const char*>(p), std::min(n, kMaxHttpRequest + 1 - c.http_in.size()));
    const HttpRequest req = parse_http_request(c.http_in, kMaxHttpRequest);
    if (req.status == HttpRequest::Status::TooLarge)
        respond(c, "431 Request Header Fields Too Large", "request too large\n");
    else if (req.route == HttpRequest::Route::Metrics) {
        const auto f = req.openmetrics ? metrics::Format::OpenMetrics : metrics::Format::Prometheus;
        respond(c, "200 OK", metrics_body(mono_ns(), f), metrics::content_type(f));
    } else if (req.status == HttpRequest::Status::Complete)
        respond(c, "404 Not Found", "not found (try GET /metrics)\n");
}

void LiveServer::Impl::respond(Conn& c, const char* status, const std::string& body) {
    respond(c, status, std::make_shared<const std::string>(body));
}

void LiveServer::Impl::respond(Conn& c, const char* status, std::shared_ptr<const std::string> body,
                               const char* content_type) {
    const std::string head =
        fmt::format("HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
                    content_type, body->size());
    c.out.insert(c.out.end(), head.begin(), head.end());
    c.body = std::move(body);
    c.body_pos = 0;
    c.close_after_flush = true;
    c.out_progress_ns = mono_ns();  // the scrape timeout runs from here
    flush(c);
}

}  // namespace ncw::live

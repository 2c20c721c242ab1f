// The live collector (live_server.h; its class and parts: live_server_impl.h): connections and frames, and the loop.
#include "live/live_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "live/live_server_impl.h"

namespace ncw::live {

// ---- connections and frames: accept, read, write, the frame dispatch, HTTP /metrics requests ----

void LiveServer::Impl::log(const std::string& line) {
    try {
        if (opt.log)
            opt.log(line);
        else
            fprintf(stderr, "ncclwatch-collector: %s\n", line.c_str());
    } catch (...) {
    }
}

void LiveServer::Impl::news(const std::string& line) {
    if (!opt.log_news) return log(line);
    try {
        opt.log_news(line);
    } catch (...) {
    }
}

void LiveServer::Impl::set_events(Conn& c, bool want_out) {
    if (c.fd < 0 || c.want_out == want_out) return;
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
        c.job->ranks[c.rank].closed_ns = mono_ns();
        c.job->dirty = true;
    }
    if (c.fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
    }
    unproven.remove(id);
    if (c.proven_pid)
        if (auto p = pid_conns.find(c.proven_pid); p != pid_conns.end() && p->second == id) pid_conns.erase(p);
    buffered_total -= std::min(buffered_total, c.buffered + c.pending_bytes);
    st_buffered = buffered_total;
    if (!c.http) --rank_conns;
    const uint64_t via = c.via;
    const uint32_t channel = c.channel;
    std::vector<uint64_t> relayed;
    for (const auto& [ch, cid] : c.channels) relayed.push_back(cid);
    conns.erase(it);
    st_connections = rank_conns;
    for (const uint64_t r : relayed) close_conn(r);  // a relay gone takes its ranks' connections with it
    if (via) tell_relay_closed(via, channel, id);
}

void LiveServer::Impl::tell_relay_closed(uint64_t via, uint32_t channel, uint64_t id) {
    auto r = conns.find(via);
    if (r == conns.end()) return;
    auto ch = r->second->channels.find(channel);
    if (ch == r->second->channels.end() || ch->second != id) return;
    r->second->channels.erase(ch);
    std::vector<uint8_t> f;
    wire::encode_relay_close(channel, f);
    queue(*r->second, f);
}

void LiveServer::Impl::bad(Conn& c, const char* cause, const std::string& reason) {
    ++st_bad;
    log_peer(c, cause, reason);
    close_conn(c.id);
}

// Returns false when the connection was closed. The queued bytes go first, then the streamed body (/metrics), as
// much as the socket takes each time it drains.
bool LiveServer::Impl::flush(Conn& c) {
    if (c.fd < 0) return true;  // a relayed rank: queue() handed its bytes to the relay
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
    if (c.via) {  // a relayed rank: wrapped for its relay; closing after it (a Reject) closes the channel after it
        const uint64_t id = c.id;
        const bool closing = c.close_after_flush;
        auto r = conns.find(c.via);
        std::vector<uint8_t> f;
        wire::encode_relay(c.channel, bytes.data(), bytes.size(), f);
        const bool sent = r != conns.end() && queue(*r->second, f);
        if (!sent || closing) {
            close_conn(id);
            return false;
        }
        return true;
    }
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
        std::string ip;
        const std::string peer = peer_name(ss, ip);
        // Connections held open without a Hello never keep a rank out: past the bounds the oldest of them goes
        // (admission.h), and a new one is refused only when every connection has said Hello.
        if (!http) {
            const size_t total = std::min(opt.max_unproven, opt.max_connections);
            const size_t per_ip = is_loopback(ss) ? 0 : opt.max_unproven_per_ip;  // loopback: one address for all
            uint64_t victim = unproven.victim(ip, total, per_ip);
            if (!victim && conns.size() >= opt.max_connections && unproven.size()) victim = unproven.victim(ip, 1, 0);
            // Only one that had its chance: an honest rank says Hello within milliseconds of connecting, so a
            // burst of fresh connections (a large job starting) is read, not evicted; past the bound while all are
            // fresh, the new one is refused below and its rank retries.
            if (victim) {
                auto v = conns.find(victim);
                if (v != conns.end() && mono_ns() - v->second->opened_ns < kUnprovenGraceNs) victim = 0;
            }
            if (victim) {
                ++st_unproven_closed;
                if (auto v = conns.find(victim); v != conns.end())
                    log_peer(*v->second, "no Hello yet",
                             "closed for room: a newer connection came while it had sent no Hello (--max-unproven)");
                close_conn(victim);
            }
        }
        if (conns.size() >= opt.max_connections ||
            (!http && (unproven.size() >= opt.max_unproven ||
                       (!is_loopback(ss) && unproven.of_ip(ip) >= opt.max_unproven_per_ip)))) {
            ++st_refused;
            close(fd);
            continue;
        }
        auto c = std::make_unique<Conn>();
        c->id = next_conn_id++;
        c->fd = fd;
        c->http = http;
        c->opened_ns = mono_ns();
        c->peer = peer;
        c->ip = ip;
        c->loopback = is_loopback(ss);
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
        if (!http) {
            ++rank_conns;
            unproven.add(c->id, c->ip);
        }
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
    // The frame's body decoded; or the connection dropped as malformed (false).
    auto decoded = [&](auto& m, const char* what) {
        std::string err;
        if (wire::decode(scratch.data(), scratch.size(), m, &err)) return true;
        bad(c, "malformed", fmt::format("bad {}: {}", what, err));
        return false;
    };
    const auto type = wire::FrameType(h.type);
    const bool relay_type =
        type == wire::FrameType::Relay || type == wire::FrameType::RelayClose || type == wire::FrameType::RelayPeer;
    // A connection whose first frame is a relay's is a relay's for good.
    if (c.relay || (relay_type && !c.hello && !c.pending && !c.via)) return on_relay_frame(c, h);
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
            if (!decoded(m, "Hello")) return false;
            return on_hello(c, h, m, now);
        }
        case wire::FrameType::Proof: {
            if (!c.pending) {
                bad(c, "protocol", "a Proof without a Challenge");
                return false;
            }
            wire::Proof m;
            if (!decoded(m, "Proof")) return false;
            return on_proof(c, m, now);
        }
        case wire::FrameType::Digest: {
            wire::Digest m;
            if (!decoded(m, "Digest")) return false;
            return on_digest(c, m, now);
        }
        case wire::FrameType::State: {
            wire::State m;
            if (!decoded(m, "State")) return false;
            return on_state(c, m, now);
        }
        case wire::FrameType::KeepAlive: {
            wire::KeepAlive m;
            if (!decoded(m, "KeepAlive")) return false;
            note_lag(c.job->ranks[c.rank].heard(now, m.sent_mono_ns), now);
            return true;
        }
        case wire::FrameType::Bye: {
            RankState& r = c.job->ranks[c.rank];
            r.last_frame_ns = now;
            r.bye = true;
            HeaderInfo& h = own_snapshot(*c.job, c.rank).header;
            h.process_state = uint32_t(disk::ProcessState::ExitedClean);
            // When it left, if its last State did not say (engine/causal.h: a departure needs a time to be first).
            if (!h.end_mono_ns) h.end_mono_ns = now;
            c.job->dirty = true;
            return true;
        }
        case wire::FrameType::Relay:
        case wire::FrameType::RelayClose:
        case wire::FrameType::RelayPeer: bad(c, "protocol", "a relay's frame on a rank's connection"); return false;
        case wire::FrameType::HelloAck:
        case wire::FrameType::Challenge:
        case wire::FrameType::Reject:
        case wire::FrameType::DumpRequest:
            bad(c, "protocol", fmt::format("frame type {} goes from the collector to ranks, not back", h.type));
            return false;
    }
    return true;  // a type a newer minor added: skipped
}

Conn* LiveServer::Impl::channel_conn(Conn& c, uint32_t channel, bool* relay_gone) {
    *relay_gone = false;
    if (auto ch = c.channels.find(channel); ch != c.channels.end()) return conns.at(ch->second).get();
    if (c.channels.size() >= kMaxRelayChannels || conns.size() >= opt.max_connections) {
        ++st_refused;  // as a connection over the limit is: closed at once
        std::vector<uint8_t> f;
        wire::encode_relay_close(channel, f);
        *relay_gone = !queue(c, f);
        return nullptr;
    }
    auto k = std::make_unique<Conn>();
    const uint64_t rank_id = next_conn_id++;
    k->id = rank_id;
    k->via = c.id;
    k->channel = channel;
    k->peer = fmt::format("{} (relayed, channel {})", c.peer, channel);
    k->ip = c.ip;
    k->loopback = c.loopback;
    k->opened_ns = mono_ns();
    c.channels.emplace(channel, rank_id);
    Conn* out = k.get();
    conns.emplace(rank_id, std::move(k));
    ++rank_conns;
    st_connections = rank_conns;
    return out;
}

bool LiveServer::Impl::on_relay_frame(Conn& c, const wire::FrameHeader& h) {
    std::string err;
    uint32_t channel = 0;
    c.relay_minor = std::max(c.relay_minor, h.minor);
    if (wire::FrameType(h.type) == wire::FrameType::RelayClose) {
        if (!wire::decode_relay_close(scratch.data(), scratch.size(), channel, &err)) {
            bad(c, "malformed", "bad RelayClose: " + err);
            return false;
        }
        c.relay = true;
        unproven.remove(c.id);
        // 1.16: channel 0 is no rank's: the relay asks which protocol we speak, and the answer's header says it.
        if (channel == 0) {
            if (c.relay_answered) return true;
            c.relay_answered = true;
            std::vector<uint8_t> f;
            wire::encode_relay_close(0, f);
            return queue(c, f);
        }
        if (auto ch = c.channels.find(channel); ch != c.channels.end()) {
            const uint64_t id = ch->second;
            c.channels.erase(ch);  // the relay said it: nothing to tell it back
            close_conn(id);
        }
        return true;
    }
    if (wire::FrameType(h.type) == wire::FrameType::RelayPeer) {
        wire::RelayPeer p;
        if (!wire::decode(scratch.data(), scratch.size(), p, &err)) {
            bad(c, "malformed", "bad RelayPeer: " + err);
            return false;
        }
        c.relay = true;
        unproven.remove(c.id);
        bool gone = false;
        Conn* k = channel_conn(c, p.channel, &gone);
        // Taken before the channel's Hello only: a proof never changes who a rank already is.
        if (k && !k->hello && !k->pending) k->relay_peer = std::make_unique<wire::RelayPeer>(std::move(p));
        return !gone;
    }
    wire::FrameHeader inner;
    if (wire::FrameType(h.type) != wire::FrameType::Relay) {
        bad(c, "protocol", fmt::format("frame type {} on a relay's connection", h.type));
        return false;
    }
    if (!wire::decode_relay(scratch.data(), scratch.size(), channel, inner, &err)) {
        bad(c, "malformed", "bad Relay frame: " + err);
        return false;
    }
    c.relay = true;
    unproven.remove(c.id);
    bool gone = false;
    Conn* k = channel_conn(c, channel, &gone);
    if (!k) return !gone;
    // The wrapped frame, handled as if its rank had sent it on a connection of its own.
    scratch.erase(scratch.begin(), scratch.begin() + wire::kRelayPrefixBytes + wire::kHeaderBytes);
    const uint64_t relay_id = c.id;
    on_frame(*k, inner);
    return conns.count(relay_id) > 0;
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

// ---- the loop, start and stop ----

void LiveServer::Impl::run() noexcept {
    try {
        std::vector<epoll_event> events(1024);
        uint64_t last_sweep = mono_ns(), last_tick = 0;
        while (!stopping.load(std::memory_order_relaxed)) {
            const int n = epoll_wait(epfd, events.data(), int(events.size()), 50);
            if (n < 0 && errno != EINTR) {
                log(fmt::format("epoll_wait failed: {}", strerror(errno)));
                break;
            }
            for (int i = 0; i < n; ++i) {
                const uint64_t id = events[size_t(i)].data.u64;
                const uint32_t ev = events[size_t(i)].events;
                if (id == kListenId) {
                    accept_all(listen_fd, false);
                    continue;
                }
                if (id == kMetricsId) {
                    accept_all(metrics_fd, true);
                    continue;
                }
                if (id == kWakeId) {
                    uint64_t n = 0;
                    if (read(wake_fd, &n, sizeof n) < 0) {
                    }
                    take_analysis();
                    continue;
                }
                auto it = conns.find(id);
                if (it == conns.end()) continue;  // closed earlier in this batch
                Conn& c = *it->second;
                if (ev & EPOLLOUT) {
                    if (!flush(c)) continue;
                }
                if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
            }
            const uint64_t now = mono_ns();
            if (now - last_tick >= kTickNs / 2) {
                last_tick = now;
                maybe_analyze(now);
            }
            if (now - last_sweep >= sweep_period_ns()) {
                last_sweep = now;
                sweep(now);
            }
        }
    } catch (const std::exception& e) {
        log(std::string("live collector stopped: ") + e.what());
    } catch (...) {
        log("live collector stopped: unknown error");
    }
}

void LiveServer::Impl::close_all() {
    std::vector<uint64_t> ids;
    for (const auto& [id, c] : conns) ids.push_back(id);
    for (uint64_t id : ids) close_conn(id);
    for (int* fd : {&listen_fd, &metrics_fd, &wake_fd, &epfd, &spare_fd})
        if (*fd >= 0) close(*fd), *fd = -1;
}

LiveServer::LiveServer(ServerOptions opt) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(opt); }

LiveServer::~LiveServer() { stop(); }

bool LiveServer::start(std::string* err) noexcept {
    try {
        Impl& m = *impl_;
        if (m.started) return true;
        m.boot = this_boot_id_hash();
        m.own_uid = geteuid();
        m.own_pid_ns = own_pid_namespace();
        m.hostname = this_hostname();
        if (!m.opt.token.empty() && !m.opt.metrics_ids && !fresh_nonce(m.pseudonym_key))
            m.pseudonym_key = m.opt.token + m.hostname;  // never shown; only keys the /metrics pseudonyms
        m.epfd = epoll_create1(EPOLL_CLOEXEC);
        m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        m.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (m.epfd < 0 || m.wake_fd < 0) {
            if (err) *err = std::string("epoll/eventfd: ") + strerror(errno);
            m.close_all();
            return false;
        }
        m.listen_fd = listen_on(m.opt.listen, m.port, err);
        if (m.listen_fd < 0) {
            m.close_all();
            return false;
        }
        if (!m.opt.metrics_listen.empty()) {
            m.metrics_fd = listen_on(m.opt.metrics_listen, m.metrics_port, err);
            if (m.metrics_fd < 0) {
                m.close_all();
                return false;
            }
        }
        auto add = [&](int fd, uint64_t id) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u64 = id;
            epoll_ctl(m.epfd, EPOLL_CTL_ADD, fd, &ev);
        };
        add(m.listen_fd, Impl::kListenId);
        if (m.metrics_fd >= 0) add(m.metrics_fd, Impl::kMetricsId);
        add(m.wake_fd, Impl::kWakeId);
        m.stopping = false;
        m.cancel_analysis = false;
        m.thread = std::thread([&m] { m.run(); });
        m.started = true;
        return true;
    } catch (const std::exception& e) {
        if (err) *err = e.what();
        impl_->close_all();
        return false;
    } catch (...) {  // noexcept, and with NCCLWATCH_COLLECTOR=auto it runs inside rank 0's training process
        if (err) *err = "unknown error";
        impl_->close_all();
        return false;
    }
}

void LiveServer::stop() noexcept {
    Impl& m = *impl_;
    if (!m.started) return;
    m.stopping = true;
    m.cancel_analysis = true;  // an analysis under way on the loop's thread stops at its next step
    const uint64_t one = 1;
    if (write(m.wake_fd, &one, sizeof one) < 0) {
    }
    if (m.thread.joinable()) m.thread.join();
    m.worker.reset();  // joins the analysis thread (after the task it may be running)
    m.close_all();
    m.started = false;
}

ServerStats LiveServer::stats() const noexcept {
    const Impl& m = *impl_;
    ServerStats s;
    s.connections = m.st_connections;
    s.ranks_known = m.st_ranks;
    s.frames = m.st_frames;
    s.bad_frames = m.st_bad;
    s.reports = m.st_reports;
    s.analyses = m.st_analyses;
    s.refused = m.st_refused;
    s.evicted_jobs = m.st_evicted;
    s.buffered_bytes = m.st_buffered;
    s.log_suppressed = m.st_suppressed;
    s.claims_refused = m.st_claims;
    s.unproven_closed = m.st_unproven_closed;
    s.state_bytes = m.st_state_bytes;
    s.port = m.port;
    s.metrics_port = m.metrics_port;
    return s;
}

}  // namespace ncw::live

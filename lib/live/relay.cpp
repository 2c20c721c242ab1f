#include "live/relay.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

#include "live/net.h"
#include "live/peer_proof.h"
#include "read/endpoint.h"
#include "read/text.h"
#include "read/time_base.h"
#include "read/wire.h"

namespace ncw::live {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxRankOut = 4u << 20;      // what the collector sent a rank that does not read; past it, closed
constexpr size_t kUpstreamPause = 16u << 20;  // ranks are not read while this much waits for the collector...
constexpr size_t kUpstreamResume = 4u << 20;  // ...until it is down to this
constexpr uint64_t kRetryMinNs = 200'000'000, kRetryMaxNs = 5'000'000'000;
constexpr uint64_t kConnectTimeoutNs = 10'000'000'000;
// How long the collector has to answer the relay's probe (protocol 1.16) before it is taken as older: on loopback or a
// cluster's network, an answer takes milliseconds.
constexpr uint64_t kProbeWaitNs = 1'000'000'000;

inline uint64_t mono_ns() { return time_base::clock_ns(CLOCK_MONOTONIC); }

// Bytes waiting to go out on a socket.
struct OutBuffer {
    std::vector<uint8_t> bytes;
    size_t pos = 0;
    size_t pending() const { return bytes.size() - pos; }
    // false: the socket failed.
    bool flush(int fd) {
        while (pos < bytes.size()) {
            const ssize_t n = send(fd, bytes.data() + pos, bytes.size() - pos, MSG_NOSIGNAL);
            if (n > 0) {
                pos += size_t(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            return false;
        }
        if (pos == bytes.size()) {
            bytes.clear();
            pos = 0;
        } else if (pos > (1u << 20)) {
            bytes.erase(bytes.begin(), bytes.begin() + ptrdiff_t(pos));
            pos = 0;
        }
        return true;
    }
};

struct RankConn {
    int fd = -1;
    uint32_t channel = 0;
    uint64_t opened_ns = 0;
    bool first_sent = false;  // its first frame went up (after its proof, when it was a Hello)
    std::vector<uint8_t> in;  // a partly received frame (or several)
    OutBuffer out;
    bool want_out = false;
    bool close_after_flush = false;  // the collector closed the channel: what it sent last goes out first
};

}  // namespace

struct Relay::Impl {
    RelayOptions opt;
    Endpoint up_ep;
    int epfd = -1, listen_fd = -1, wake_fd = -1, up_fd = -1;
    bool up_connecting = false, up_open = false, paused = false;
    // 1.16: the collector answered the probe (or took too long: an older one, up_ready with proofs off); ranks are
    // taken only once it is known whether it takes their proofs.
    bool up_ready = false, proofs = false;
    uint64_t up_ready_by = 0;
    PidScanBudget budget;  // this relay's /proc walks (peer_proof.h), as the collector's
    uint64_t pid_ns = 0;   // our pid namespace, said with each proof
    uint64_t up_retry_at = 0, up_retry_ns = kRetryMinNs, up_connect_deadline = 0;
    OutBuffer up_out;
    bool up_want_out = false;
    wire::FrameReader up_reader;
    std::unordered_map<uint64_t, RankConn> ranks;  // by id (= epoll data)
    std::unordered_map<uint32_t, uint64_t> by_channel;
    uint64_t next_id = 16;  // ids below are the relay's own sockets
    uint32_t next_channel = 1;
    bool said_down = false;
    std::thread thread;
    std::atomic<bool> stopping{false};
    bool started = false;
    uint16_t port = 0;
    std::atomic<uint64_t> st_ranks{0}, st_up{0}, st_down{0}, st_connects{0};
    std::atomic<bool> st_up_open{false};
    std::vector<uint8_t> scratch;

    static constexpr uint64_t kListenId = 1, kWakeId = 2, kUpId = 3;

    void log(const std::string& line) {
        if (opt.log)
            opt.log(line);
        else
            std::fprintf(stderr, "ncclwatch-collector: %s\n", line.c_str());
    }

    void watch(int fd, uint64_t id, bool out, int op) {
        epoll_event ev{};
        ev.events = (paused && id >= 16 ? 0u : uint32_t(EPOLLIN)) | (out ? uint32_t(EPOLLOUT) : 0u);
        ev.data.u64 = id;
        epoll_ctl(epfd, op, fd, &ev);
    }

    // ---- the upstream: one connection to the collector ----

    void up_connect(uint64_t now) {
        std::string why;
        up_fd = connect_start(up_ep, &why);
        if (up_fd < 0) return up_failed(now, why);
        up_connecting = true;
        up_connect_deadline = now + kConnectTimeoutNs;
        up_want_out = true;
        watch(up_fd, kUpId, true, EPOLL_CTL_ADD);
    }

    void up_connected() {
        std::string why;
        if (!connect_finished(up_fd, &why)) return up_lost(why);
        up_connecting = false;
        up_open = true;
        ++st_connects;
        up_retry_ns = kRetryMinNs;
        up_reader = wire::FrameReader{};
        log(fmt::format("{} the collector at {}:{}", said_down ? "reconnected to" : "connected to", up_ep.host,
                        up_ep.port));
        said_down = false;
        up_set_out(false);
        // 1.16: which protocol it speaks, before any rank's frame: a RelayClose of channel 0, no rank's, which an
        // older collector ignores and a newer one answers in kind (its frame header says its minor).
        up_ready = proofs = false;
        up_ready_by = mono_ns() + kProbeWaitNs;
        std::vector<uint8_t> f;
        wire::encode_relay_close(0, f);
        up_queue(f);
    }

    void up_set_ready(bool with_proofs) {
        up_ready = true;
        proofs = with_proofs;
        st_up_open = true;
        if (!proofs)
            log(
                fmt::format("the collector at {}:{} did not answer the relay's probe within {} s (older than protocol "
                            "1.{}?): the relay sends it no proof of its ranks' pids",
                            up_ep.host, up_ep.port, kProbeWaitNs / 1'000'000'000, wire::kMinorRelayProof));
    }

    void up_set_out(bool out) {
        if (up_fd < 0 || up_want_out == out) return;
        up_want_out = out;
        watch(up_fd, kUpId, out, EPOLL_CTL_MOD);
    }

    void up_failed(uint64_t now, const std::string& why) {
        if (!said_down)
            log(fmt::format("cannot reach the collector at {}:{} ({}); retrying", up_ep.host, up_ep.port, why));
        said_down = true;
        up_retry_at = now + up_retry_ns;
        up_retry_ns = std::min(up_retry_ns * 2, kRetryMaxNs);
    }

    // The collector forgot every channel with the connection: every rank's connection goes too, and each rank's
    // client reconnects (with a fresh Hello) once the upstream is back.
    void up_lost(const std::string& why) {
        if (up_fd >= 0) {
            epoll_ctl(epfd, EPOLL_CTL_DEL, up_fd, nullptr);
            close(up_fd);
        }
        up_fd = -1;
        const bool was_open = up_open;
        up_open = up_connecting = up_ready = proofs = false;
        st_up_open = false;
        up_out = OutBuffer{};
        std::vector<uint64_t> ids;
        for (const auto& [id, r] : ranks) ids.push_back(id);
        for (const uint64_t id : ids) close_rank(id, false);
        set_paused(false);
        if (was_open) {
            log(fmt::format("lost the collector at {}:{} ({}); closed the node's {} rank connection(s), reconnecting",
                            up_ep.host, up_ep.port, why, ids.size()));
            said_down = true;
        }
        up_failed(mono_ns(), why);
    }

    bool up_queue(const std::vector<uint8_t>& f) {
        up_out.bytes.insert(up_out.bytes.end(), f.begin(), f.end());
        if (!up_out.flush(up_fd)) {
            up_lost(std::strerror(errno));
            return false;
        }
        up_set_out(up_out.pending() > 0);
        set_paused(up_out.pending() > kUpstreamPause || (paused && up_out.pending() > kUpstreamResume));
        return true;
    }

    // Backpressure: a collector that reads slowly slows the ranks' sockets, not the relay's memory.
    void set_paused(bool p) {
        if (p == paused) return;
        paused = p;
        for (auto& [id, r] : ranks) watch(r.fd, id, r.want_out, EPOLL_CTL_MOD);
    }

    void up_readable() {
        uint8_t buf[kReadChunk];
        const ssize_t n = recv(up_fd, buf, sizeof buf, 0);
        if (n == 0) return up_lost("closed by the collector; is it older than protocol 1.7?");
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) up_lost(std::strerror(errno));
            return;
        }
        up_reader.feed(buf, size_t(n));
        wire::FrameHeader h;
        std::string err;
        while (up_fd >= 0) {
            const auto s = up_reader.next(h, scratch, &err);
            if (s == wire::FrameReader::Status::NeedMore) return;
            if (s == wire::FrameReader::Status::Error) return up_lost("malformed frame from the collector: " + err);
            uint32_t channel = 0;
            if (wire::FrameType(h.type) == wire::FrameType::RelayClose) {
                if (!wire::decode_relay_close(scratch.data(), scratch.size(), channel, &err))
                    return up_lost("malformed RelayClose from the collector: " + err);
                if (channel == 0) {  // the answer to our probe (1.16)
                    if (!up_ready) up_set_ready(h.minor >= wire::kMinorRelayProof);
                    continue;
                }
                if (auto it = by_channel.find(channel); it != by_channel.end()) {
                    const uint64_t id = it->second;
                    by_channel.erase(it);  // the collector knows: nothing to tell it back
                    ranks.at(id).close_after_flush = true;
                    flush_rank(id);
                }
                continue;
            }
            if (wire::FrameType(h.type) != wire::FrameType::Relay) {
                // A collector older than 1.7 answers the first relayed frame as a rank's (a Reject, then it closes).
                return up_lost(
                    fmt::format("the collector sent frame type {} to a relay; is it older than protocol "
                                "1.7?",
                                h.type));
            }
            wire::FrameHeader inner;
            if (!wire::decode_relay(scratch.data(), scratch.size(), channel, inner, &err))
                return up_lost("malformed Relay frame from the collector: " + err);
            auto it = by_channel.find(channel);
            if (it == by_channel.end()) continue;  // that rank is gone already
            ++st_down;
            RankConn& r = ranks.at(it->second);
            r.out.bytes.insert(r.out.bytes.end(), scratch.begin() + wire::kRelayPrefixBytes, scratch.end());
            if (r.out.pending() > kMaxRankOut) {
                close_rank(it->second, true);
                continue;
            }
            flush_rank(it->second);
        }
    }

    // ---- the node's ranks ----

    void accept_all() {
        for (int i = 0; i < 256; ++i) {
            const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;
            // No collector (or not known yet whether it takes proofs), or too many ranks: closed at once, as the
            // collector would; the rank's client retries.
            if (!up_open || !up_ready || ranks.size() >= opt.max_ranks) {
                close(fd);
                continue;
            }
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            const uint64_t id = next_id++;
            RankConn& r = ranks[id];
            r.fd = fd;
            r.opened_ns = mono_ns();
            r.channel = next_channel++;
            if (next_channel == 0) next_channel = 1;
            by_channel[r.channel] = id;
            watch(fd, id, false, EPOLL_CTL_ADD);
            st_ranks = ranks.size();
        }
    }

    // tell_up: the rank's socket closed here (or failed), so the collector hears it as a socket close.
    void close_rank(uint64_t id, bool tell_up) {
        auto it = ranks.find(id);
        if (it == ranks.end()) return;
        RankConn& r = it->second;
        epoll_ctl(epfd, EPOLL_CTL_DEL, r.fd, nullptr);
        close(r.fd);
        const uint32_t channel = r.channel;
        const bool known = by_channel.count(channel) && by_channel[channel] == id;
        if (known) by_channel.erase(channel);
        ranks.erase(it);
        st_ranks = ranks.size();
        if (tell_up && known && up_open) {
            std::vector<uint8_t> f;
            wire::encode_relay_close(channel, f);
            up_queue(f);
        }
    }

    void flush_rank(uint64_t id) {
        RankConn& r = ranks.at(id);
        if (!r.out.flush(r.fd)) return close_rank(id, true);
        if (r.out.pending() == 0 && r.close_after_flush) return close_rank(id, false);
        const bool out = r.out.pending() > 0;
        if (out != r.want_out) {
            r.want_out = out;
            watch(r.fd, id, out, EPOLL_CTL_MOD);
        }
    }

    // 1.16: who holds the rank's socket, as the collector proves a direct rank (peer_proof.h), for the pid its Hello
    // claims: the proof goes up before the Hello. false: the Hello does not decode (the collector refuses it).
    bool prove_rank(const RankConn& r, const uint8_t* payload, size_t n, wire::RelayPeer& p) {
        wire::Hello hello;
        std::string why;
        if (!wire::decode(payload, n, hello, &why)) return false;
        const int64_t claimed = hello.header.pid;
        p = wire::RelayPeer{};
        p.channel = r.channel;
        p.pid_ns = pid_ns;
        PeerSocket ps;
        if (!find_peer_socket(r.fd, ps, &why)) {
            p.result = wire::RelayPeer::Unproven;
            p.why = fmt::format("cannot find the rank's socket to prove pid {} ({})", claimed, why);
            return true;
        }
        p.flags |= wire::kPeerUidKnown;
        p.uid = ps.uid;
        const PidProof proof = prove_pid_of_socket(ps, claimed, budget, mono_ns(), "/proc", r.opened_ns);
        p.result = proof.result == PidProof::Result::Proven    ? wire::RelayPeer::Proven
                   : proof.result == PidProof::Result::Refused ? wire::RelayPeer::Refused
                                                               : wire::RelayPeer::Unproven;
        p.pid = proof.peer_pid;
        if (proof.gid_known) {
            p.flags |= wire::kPeerGidKnown;
            p.gid = proof.peer_gid;
        }
        if (proof.by_uid) p.flags |= wire::kPeerByUid;
        p.why = proof.why;
        return true;
    }

    // Whole frames of the rank go upstream under its channel, as they came: only their headers are read (magic,
    // version, length), so a rank that sends garbage is closed here as the collector would close it; and its first,
    // a Hello, for the pid it claims (prove_rank).
    void rank_readable(uint64_t id) {
        RankConn& r = ranks.at(id);
        uint8_t buf[kReadChunk];
        const ssize_t n = recv(r.fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return close_rank(id, true);
        if (n < 0) return;
        if (r.close_after_flush) return;
        r.in.insert(r.in.end(), buf, buf + n);
        size_t pos = 0;
        std::vector<uint8_t> f;
        while (r.in.size() - pos >= wire::kHeaderBytes) {
            wire::FrameHeader h;
            if (!wire::decode_header(r.in.data() + pos, r.in.size() - pos, h, nullptr) ||
                h.type == uint16_t(wire::FrameType::Relay) || h.type == uint16_t(wire::FrameType::RelayClose) ||
                h.type == uint16_t(wire::FrameType::RelayPeer))
                return close_rank(id, true);  // (a rank's frame is never over kMaxPayload: decode_header's limit)
            if (r.in.size() - pos - wire::kHeaderBytes < h.length) break;
            if (!r.first_sent) {
                r.first_sent = true;
                wire::RelayPeer p;
                if (proofs && h.type == uint16_t(wire::FrameType::Hello) &&
                    prove_rank(r, r.in.data() + pos + wire::kHeaderBytes, h.length, p))
                    wire::encode(p, f);
            }
            wire::encode_relay(r.channel, r.in.data() + pos, wire::kHeaderBytes + h.length, f);
            pos += wire::kHeaderBytes + h.length;
            ++st_up;
        }
        r.in.erase(r.in.begin(), r.in.begin() + ptrdiff_t(pos));
        if (!f.empty()) up_queue(f);
    }

    // ---- the loop ----

    void run() noexcept {
        try {
            std::vector<epoll_event> events(256);
            while (!stopping.load(std::memory_order_relaxed)) {
                const uint64_t now = mono_ns();
                if (up_fd < 0 && now >= up_retry_at) up_connect(now);
                if (up_connecting && now >= up_connect_deadline) up_lost("connect timed out");
                if (up_open && !up_ready && now >= up_ready_by) up_set_ready(false);
                const int n = epoll_wait(epfd, events.data(), int(events.size()), 100);
                if (n < 0 && errno != EINTR) {
                    log(fmt::format("epoll_wait failed: {}", std::strerror(errno)));
                    break;
                }
                for (int i = 0; i < n; ++i) {
                    const uint64_t id = events[size_t(i)].data.u64;
                    const uint32_t ev = events[size_t(i)].events;
                    if (id == kListenId) {
                        accept_all();
                    } else if (id == kUpId) {
                        if (up_fd < 0) continue;
                        if (up_connecting) {
                            if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) up_connected();
                            continue;
                        }
                        if (ev & EPOLLOUT) {
                            if (!up_out.flush(up_fd)) {
                                up_lost(std::strerror(errno));
                                continue;
                            }
                            up_set_out(up_out.pending() > 0);
                            if (paused && up_out.pending() <= kUpstreamResume) set_paused(false);
                        }
                        if (up_fd >= 0 && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) up_readable();
                    } else if (id >= 16 && ranks.count(id)) {
                        if (ev & EPOLLOUT) {
                            flush_rank(id);
                            if (!ranks.count(id)) continue;
                        }
                        if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) rank_readable(id);
                    }
                }
            }
        } catch (const std::exception& e) {
            log(std::string("relay stopped: ") + e.what());
        } catch (...) {
            log("relay stopped: unknown error");
        }
    }
};

Relay::Relay(RelayOptions opt) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(opt); }

Relay::~Relay() { stop(); }

bool Relay::start(std::string* err) noexcept {
    try {
        Impl& m = *impl_;
        if (m.started) return true;
        std::string why;
        if (!parse_endpoint(m.opt.upstream, m.up_ep, &why)) {
            if (err) *err = "the collector's address " + why;
            return false;
        }
        m.listen_fd = listen_on(m.opt.listen, m.port, err);
        if (m.listen_fd < 0) return false;
        m.pid_ns = own_pid_namespace();
        m.epfd = epoll_create1(EPOLL_CLOEXEC);
        m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (m.epfd < 0 || m.wake_fd < 0) {
            if (err) *err = std::string("epoll/eventfd: ") + std::strerror(errno);
            return false;
        }
        m.watch(m.listen_fd, Impl::kListenId, false, EPOLL_CTL_ADD);
        m.watch(m.wake_fd, Impl::kWakeId, false, EPOLL_CTL_ADD);
        m.thread = std::thread([&m] { m.run(); });
        m.started = true;
        return true;
    } catch (const std::exception& e) {
        if (err) *err = e.what();
        return false;
    }
}

void Relay::stop() noexcept {
    Impl& m = *impl_;
    if (m.started) {
        m.stopping = true;
        const uint64_t one = 1;
        if (write(m.wake_fd, &one, sizeof one) < 0) {
        }
        if (m.thread.joinable()) m.thread.join();
        m.started = false;
    }
    for (auto& [id, r] : m.ranks) close(r.fd);
    m.ranks.clear();
    for (int* fd : {&m.up_fd, &m.listen_fd, &m.wake_fd, &m.epfd})
        if (*fd >= 0) close(*fd), *fd = -1;
}

RelayStats Relay::stats() const noexcept {
    const Impl& m = *impl_;
    RelayStats s;
    s.ranks = m.st_ranks;
    s.frames_up = m.st_up;
    s.frames_down = m.st_down;
    s.upstream_connects = m.st_connects;
    s.upstream_up = m.st_up_open;
    s.port = m.port;
    return s;
}

}  // namespace ncw::live

// The live collector: one epoll thread that accepts rank connections, keeps each rank's latest Hello + Digest as a
// FileSnapshot on the collector's clock, runs the offline analysis (job_view.h) as digests change, reports new
// verdicts once, asks the job's ranks for dumps, and answers GET /metrics.
#include "live/live_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "read/time_base.h"
#include "read/wire.h"
#include "report/metrics.h"
#include "report/report_json.h"

namespace ncw::live {

namespace {

using json = nlohmann::json;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxOutBuffer = 4u << 20;  // a rank that does not read its DumpRequests is dropped past this
constexpr size_t kMaxHttpRequest = 8 * 1024;
constexpr size_t kMaxRanks = 1u << 20;  // distinct (job, rank) kept: a hostile client cannot grow memory forever
constexpr size_t kMaxJobs = 4096;
constexpr size_t kMaxLoggedPeers = 4096;
constexpr size_t kMaxTableRows = 256;  // per communicator in the text report (the JSON has every rank)
constexpr uint64_t kTickNs = 100'000'000;
constexpr uint64_t kIdleAnalysisNs = 1'000'000'000;  // full analysis (mismatches) at most this often

using time_base::clock_ns;
using time_base::shift;
uint64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }

// One-way minimum filter: offset = min over the last kWindow samples of (receive time - send time), i.e. the rank's
// clock moved onto ours plus the smallest one-way delay seen. The spread of the window bounds how noisy it is.
struct OffsetFilter {
    static constexpr size_t kWindow = 64;
    std::array<int64_t, kWindow> samples{};
    size_t count = 0;
    size_t next = 0;
    bool exact = false;  // same boot as the collector: the clocks are one clock, offset 0

    void add(int64_t v) {
        samples[next] = v;
        next = (next + 1) % kWindow;
        count = std::min(count + 1, kWindow);
    }
    int64_t offset() const {
        if (exact || !count) return 0;
        return *std::min_element(samples.begin(), samples.begin() + count);
    }
    int64_t spread() const {
        if (exact || !count) return 0;
        auto [lo, hi] = std::minmax_element(samples.begin(), samples.begin() + count);
        return *hi - *lo;
    }
};

struct Job;

struct RankState {
    std::string key;
    uint64_t conn_id = 0;  // 0 = not connected
    uint64_t last_frame_ns = 0;
    bool bye = false;
    OffsetFilter clock;
    uint64_t rank_start_mono_ns = 0;  // as the rank sent it (its own clock)
};

struct Job {
    std::string id;
    std::vector<FileSnapshot> snaps;  // parallel to ranks; timestamps on the collector's clock
    std::vector<RankState> ranks;
    std::unordered_map<std::string, size_t> index;
    bool dirty = false;
    uint64_t last_analysis_ns = 0;
    std::set<std::string> reported;  // verdicts already reported (kind, comm, seq, culprits)
    uint64_t stall_reported_ns = 0;  // when the active stall was first reported; 0 = none
    // From the latest analysis: per communicator, the comm ranks named as culprits and as waiting.
    std::map<uint64_t, std::pair<std::set<int>, std::set<int>>> named;
    uint64_t dump_requests = 0;
    double last_analysis_cost_s = 0;
};

struct Conn {
    uint64_t id = 0;
    int fd = -1;
    bool http = false;
    bool hello = false;
    bool close_after_flush = false;
    std::string peer;  // "ip:port"
    std::string ip;
    uint64_t opened_ns = 0;
    wire::FrameReader reader;
    std::vector<uint8_t> out;
    size_t out_pos = 0;
    bool want_out = false;
    std::string http_in;
    Job* job = nullptr;
    size_t rank = 0;
};

bool split_host_port(const std::string& s, std::string& host, std::string& port) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos || colon + 1 >= s.size()) return false;
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "*") host = "0.0.0.0";
    return !host.empty();
}

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

// Constant time in the length of the expected token.
bool token_ok(const std::string& expected, const std::string& got) {
    unsigned diff = expected.size() != got.size();
    for (size_t i = 0; i < expected.size(); ++i) diff |= uint8_t(expected[i]) ^ uint8_t(i < got.size() ? got[i] : 0);
    return diff == 0;
}

// Job ids come from the network: keep a path component of safe characters only.
std::string safe_component(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 128)) out += (isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '_';
    if (out.empty() || out == "." || out == "..") out = "job";
    return out;
}

using report::clean;

std::string verdict_key(const verdict::Verdict& v) {
    std::string k = fmt::format("{}|{:x}|{}|", verdict::kind_name(v.kind), v.comm_id, v.seq);
    for (int r : v.culprits) k += std::to_string(r) + ",";
    return k;
}

// A stall (as opposed to a mismatch or a straggler, which do not hold anything up).
bool is_stall(verdict::Kind k) { return k != verdict::Kind::Mismatch && k != verdict::Kind::Straggler; }

bool mkdirs(const std::string& dir) {
    std::string cur;
    for (size_t i = 0; i <= dir.size(); ++i) {
        if (i == dir.size() || dir[i] == '/') {
            if (!cur.empty() && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
        }
        if (i < dir.size()) cur += dir[i];
    }
    return true;
}

bool write_file(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) return false;
    const bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
    if (fclose(f) != 0 || !ok) return false;
    return rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

struct LiveServer::Impl {
    ServerOptions opt;
    int epfd = -1;
    int listen_fd = -1;
    int metrics_fd = -1;
    int wake_fd = -1;
    int spare_fd = -1;  // closed to accept-and-drop when out of descriptors
    std::thread thread;
    std::atomic<bool> stopping{false};
    bool started = false;

    std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
    uint64_t next_conn_id = 16;  // ids below are the listening sockets
    std::map<std::string, std::unique_ptr<Job>> jobs;
    size_t ranks_known = 0;
    size_t rank_conns = 0;  // conns that are not HTTP
    std::unordered_set<std::string> logged_peers;
    uint64_t boot = 0;
    std::string hostname;
    uint64_t request_id = 0;
    double last_analysis_s = 0;
    std::vector<uint8_t> scratch;

    std::atomic<uint64_t> st_connections{0}, st_ranks{0}, st_frames{0}, st_bad{0}, st_reports{0}, st_analyses{0},
        st_refused{0};
    uint16_t port = 0, metrics_port = 0;

    static constexpr uint64_t kListenId = 1, kMetricsId = 2, kWakeId = 3;

    void log(const std::string& line) {
        try {
            if (opt.log)
                opt.log(line);
            else
                fprintf(stderr, "ncclwatch-collector: %s\n", line.c_str());
        } catch (...) {
        }
    }

    // Once per peer address and reason, so a client that retries garbage cannot flood the log.
    void log_peer(const Conn& c, const std::string& reason) {
        const std::string key = c.ip + "|" + reason;
        if (logged_peers.size() >= kMaxLoggedPeers) return;
        if (!logged_peers.insert(key).second) return;
        log(fmt::format("closed connection from {}: {}", c.peer, clean(reason)));
        if (logged_peers.size() == kMaxLoggedPeers) log("too many distinct bad peers; not logging more of them");
    }

    // ---- connections ----

    void set_events(Conn& c, bool want_out) {
        if (c.want_out == want_out) return;
        epoll_event ev{};
        ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
        ev.data.u64 = c.id;
        epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
        c.want_out = want_out;
    }

    void close_conn(uint64_t id) {
        auto it = conns.find(id);
        if (it == conns.end()) return;
        Conn& c = *it->second;
        if (c.job && c.rank < c.job->ranks.size() && c.job->ranks[c.rank].conn_id == c.id) {
            c.job->ranks[c.rank].conn_id = 0;
            c.job->dirty = true;
        }
        epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
        if (!c.http) --rank_conns;
        conns.erase(it);
        st_connections = rank_conns;
    }

    void bad(Conn& c, const std::string& reason) {
        ++st_bad;
        log_peer(c, reason);
        close_conn(c.id);
    }

    // Returns false when the connection was closed.
    bool flush(Conn& c) {
        while (c.out_pos < c.out.size()) {
            const ssize_t n = send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
            if (n > 0) {
                c.out_pos += size_t(n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            close_conn(c.id);
            return false;
        }
        if (c.out_pos == c.out.size()) {
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

    bool queue(Conn& c, const std::vector<uint8_t>& bytes) {
        if (!c.http && c.out.size() - c.out_pos + bytes.size() > kMaxOutBuffer) {
            log_peer(c, "not reading what the collector sends (output buffer full)");
            close_conn(c.id);
            return false;
        }
        c.out.insert(c.out.end(), bytes.begin(), bytes.end());
        return flush(c);
    }

    void accept_all(int lfd, bool http) {
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

    void on_readable(Conn& c) {
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
        while (conns.count(id) && !c.close_after_flush) {
            const auto s = c.reader.next(h, scratch, &err);
            if (s == wire::FrameReader::Status::NeedMore) break;
            if (s == wire::FrameReader::Status::Error) {
                bad(c, err.empty() ? "malformed frame" : err);
                return;
            }
            ++st_frames;
            if (!on_frame(c, h)) return;
        }
    }

    // false: the connection was closed (or is closing).
    bool on_frame(Conn& c, const wire::FrameHeader& h) {
        const uint64_t now = mono_ns();
        std::string err;
        const auto type = wire::FrameType(h.type);
        if (!c.hello && type != wire::FrameType::Hello) {
            bad(c, fmt::format("first frame is type {}, not Hello", h.type));
            return false;
        }
        switch (type) {
            case wire::FrameType::Hello: {
                if (c.hello) {
                    bad(c, "second Hello on one connection");
                    return false;
                }
                wire::Hello m;
                if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                    bad(c, "bad Hello: " + err);
                    return false;
                }
                return on_hello(c, m, now);
            }
            case wire::FrameType::Digest: {
                wire::Digest m;
                if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                    bad(c, "bad Digest: " + err);
                    return false;
                }
                on_digest(c, m, now);
                return true;
            }
            case wire::FrameType::KeepAlive: {
                wire::KeepAlive m;
                if (!wire::decode(scratch.data(), scratch.size(), m, &err)) {
                    bad(c, "bad KeepAlive: " + err);
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
            case wire::FrameType::Reject:
            case wire::FrameType::DumpRequest:
                bad(c, fmt::format("frame type {} goes from the collector to ranks, not back", h.type));
                return false;
        }
        return true;  // a type a newer minor added: skipped
    }

    bool on_hello(Conn& c, wire::Hello& m, uint64_t now) {
        if (!opt.token.empty() && !token_ok(opt.token, m.token)) {
            ++st_bad;
            log_peer(c, m.token.empty() ? "no token (NCCLWATCH_TOKEN is required)" : "wrong token");
            std::vector<uint8_t> f;
            wire::encode(wire::Reject{"token refused"}, f);
            c.close_after_flush = true;
            queue(c, f);
            return false;
        }
        const HeaderInfo& hi = m.header;
        const std::string key =
            hi.global_rank >= 0 ? fmt::format("rank {}", hi.global_rank) : fmt::format("pid {}:{}", hi.host, hi.pid);
        auto jit = jobs.find(hi.job_id);
        if (jit == jobs.end() || !jit->second->index.count(key)) {
            if (ranks_known >= kMaxRanks || (jit == jobs.end() && jobs.size() >= kMaxJobs)) {
                ++st_bad;
                log_peer(c, "collector full (too many ranks or jobs)");
                std::vector<uint8_t> f;
                wire::encode(wire::Reject{"collector full"}, f);
                c.close_after_flush = true;
                queue(c, f);
                return false;
            }
        }
        if (jit == jobs.end()) {
            auto j = std::make_unique<Job>();
            j->id = hi.job_id;
            jit = jobs.emplace(hi.job_id, std::move(j)).first;
        }
        Job& job = *jit->second;
        size_t idx;
        auto rit = job.index.find(key);
        if (rit == job.index.end()) {
            idx = job.ranks.size();
            job.index.emplace(key, idx);
            job.ranks.emplace_back();
            job.ranks.back().key = key;
            job.snaps.emplace_back();
            ++ranks_known;
            st_ranks = ranks_known;
        } else {
            idx = rit->second;
            // A reconnect: the old connection (if the collector has not noticed it die yet) is stale.
            if (job.ranks[idx].conn_id && job.ranks[idx].conn_id != c.id) close_conn(job.ranks[idx].conn_id);
        }
        RankState& r = job.ranks[idx];
        FileSnapshot& s = job.snaps[idx];
        const bool restarted = s.ok && s.header.pid != hi.pid;
        r.conn_id = c.id;
        r.last_frame_ns = now;
        r.bye = false;
        if (restarted || !s.ok) r.clock = OffsetFilter{};
        r.clock.exact = hi.boot_id_hash != 0 && hi.boot_id_hash == boot;
        r.rank_start_mono_ns = hi.start_mono_ns;
        if (!r.clock.exact && hi.heartbeat_mono_ns) r.clock.add(int64_t(now - hi.heartbeat_mono_ns));

        s.ok = true;
        s.error.clear();
        s.path = hi.host + ":" + (m.file.empty() ? std::string("(live)") : m.file);
        s.header = std::move(m.header);
        if (restarted) s.comms.clear();
        put_header_on_our_clock(r, s.header);
        c.hello = true;
        c.job = &job;
        c.rank = idx;
        job.dirty = true;

        std::vector<uint8_t> f;
        wire::encode_hello_ack(f);
        return queue(c, f);
    }

    // The analysis runs in live mode on this boot's clock: the header is made to look like a file of this boot
    // (so nothing is rebased through wall clocks), with the start moved by the measured offset. A rank on another
    // host keeps its host name, so job_view never probes its pid here; one on another boot of a host with our name
    // is renamed, for the same reason.
    void put_header_on_our_clock(const RankState& r, HeaderInfo& h) {
        const bool same_boot = r.clock.exact;
        if (!same_boot && h.host == hostname) h.host += " (other boot)";
        h.boot_id_hash = boot;
        h.start_mono_ns = shift(r.rank_start_mono_ns, r.clock.offset());
    }

    void on_digest(Conn& c, wire::Digest& m, uint64_t now) {
        Job& job = *c.job;
        RankState& r = job.ranks[c.rank];
        FileSnapshot& s = job.snaps[c.rank];
        r.last_frame_ns = now;
        if (m.sent_mono_ns && !r.clock.exact) r.clock.add(int64_t(now - m.sent_mono_ns));
        const int64_t d = r.clock.offset();
        s.header.start_mono_ns = shift(r.rank_start_mono_ns, d);
        s.header.process_state = m.process_state;
        s.header.num_comms = uint32_t(m.comms.size());
        for (auto& ci : m.comms) time_base::rebase(ci, d);
        s.comms = std::move(m.comms);
        job.dirty = true;
    }

    // ---- HTTP /metrics ----

    void on_http(Conn& c, const uint8_t* p, size_t n) {
        if (c.http_in.size() + n > kMaxHttpRequest) {
            respond(c, "431 Request Header Fields Too Large", "request too large\n");
            return;
        }
        c.http_in.append(reinterpret_cast<const char*>(p), n);
        if (c.http_in.find("\r\n\r\n") == std::string::npos && c.http_in.find("\n\n") == std::string::npos) return;
        const auto eol = c.http_in.find_first_of("\r\n");
        const std::string line = c.http_in.substr(0, eol);
        if (line.rfind("GET /metrics ", 0) == 0 || line == "GET /metrics")
            respond(c, "200 OK", render_metrics());
        else
            respond(c, "404 Not Found", "not found (try GET /metrics)\n");
    }

    void respond(Conn& c, const char* status, const std::string& body) {
        const std::string head = fmt::format(
            "HTTP/1.0 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n"
            "Connection: close\r\n\r\n",
            status, body.size());
        std::vector<uint8_t> bytes(head.begin(), head.end());
        bytes.insert(bytes.end(), body.begin(), body.end());
        c.close_after_flush = true;
        queue(c, bytes);
    }

    std::string render_metrics() {
        const uint64_t now = mono_ns();
        std::vector<metrics::RankCommSample> samples;
        for (const auto& [id, job] : jobs) {
            for (size_t i = 0; i < job->ranks.size(); ++i) {
                const auto& s = job->snaps[i];
                const auto& r = job->ranks[i];
                for (const auto& ci : s.comms) {
                    if (ci.comm_id == 0) continue;
                    metrics::RankCommSample m;
                    m.job = job->id;
                    m.global_rank = s.header.global_rank;
                    m.host = s.header.host;
                    m.pid = s.header.pid;
                    m.comm_id = ci.comm_id;
                    m.comm_rank = ci.rank;
                    m.issued = ci.coll_issued;
                    m.reached = ci.coll_reached;
                    m.completed = ci.coll_completed;
                    if (ci.t_last_progress_ns)
                        m.since_progress_s =
                            now > ci.t_last_progress_ns ? double(now - ci.t_last_progress_ns) / 1e9 : 0.0;
                    auto nit = job->named.find(ci.comm_id);
                    if (nit != job->named.end()) {
                        m.culprit = nit->second.first.count(ci.rank) > 0;
                        m.stalled = m.culprit || nit->second.second.count(ci.rank) > 0;
                    }
                    m.stalled = m.stalled || ci.stall_since_ns != 0;
                    m.connected = r.conn_id != 0;
                    m.alive = !r.bye && (r.conn_id != 0 || double(now - r.last_frame_ns) / 1e9 <= opt.dead_after_s);
                    samples.push_back(std::move(m));
                }
            }
        }
        metrics::CollectorTotals t;
        t.connections = st_connections;
        t.ranks_known = ranks_known;
        t.jobs = jobs.size();
        t.frames = st_frames;
        t.bad_frames = st_bad;
        t.reports = st_reports;
        t.analyses = st_analyses;
        t.last_analysis_s = last_analysis_s;
        return metrics::render(samples, t);
    }

    // ---- analysis ----

    // Whether something in the job may already be a verdict the analysis would report: an outstanding collective
    // without progress for the timeout, an init running that long, a flagged stall or error, a connection lost past
    // the grace. One pass over the snapshots, far cheaper than the analysis, so a stall is caught on the first tick
    // after it passes the timeout while the full analysis (for mismatches) runs less often.
    bool something_due(const Job& job, uint64_t now) const {
        const uint64_t timeout = uint64_t(opt.timeout_s * 1e9), grace = uint64_t(opt.dead_after_s * 1e9);
        for (size_t i = 0; i < job.ranks.size(); ++i) {
            const auto& r = job.ranks[i];
            if (!r.conn_id && !r.bye && now - r.last_frame_ns >= grace) return true;
            for (const auto& c : job.snaps[i].comms) {
                if (c.stall_since_ns || c.async_error) return true;
                if (c.coll_issued > c.coll_completed) {
                    const uint64_t since = std::max(c.t_last_progress_ns, c.t_last_issue_ns);
                    if (since && now > since && now - since >= timeout) return true;
                }
                if (c.state == uint32_t(disk::CommState::Initializing) && c.t_init_start_ns &&
                    now > c.t_init_start_ns && now - c.t_init_start_ns >= timeout)
                    return true;
            }
        }
        return false;
    }

    void maybe_analyze(uint64_t now) {
        for (auto& [id, job] : jobs) {
            // Never more than a third of the time in analysis, however large the job.
            const uint64_t cost = uint64_t(job->last_analysis_cost_s * 3e9);
            const uint64_t period = std::max(uint64_t(std::max(0.01, opt.analyze_period_s) * 1e9), cost);
            const uint64_t full_period = std::max(period, kIdleAnalysisNs);
            const uint64_t since = now - job->last_analysis_ns;
            if (since < period) continue;
            const bool run = (job->dirty && since >= full_period) || (job->dirty && job->stall_reported_ns) ||
                             since >= 4 * full_period || something_due(*job, now);
            if (run) analyze_job(*job, now);
        }
    }

    void analyze_job(Job& job, uint64_t now) {
        job.dirty = false;
        job.last_analysis_ns = now;
        // Connected ranks are alive now; a disconnected one ages from its last frame and is gone after dead_after_s.
        for (size_t i = 0; i < job.ranks.size(); ++i) {
            const auto& r = job.ranks[i];
            job.snaps[i].header.heartbeat_mono_ns = r.conn_id ? now : r.last_frame_ns;
        }
        AnalysisOptions ao;
        ao.live = true;
        ao.now_mono_ns = now;
        ao.now_real_ns = clock_ns(CLOCK_REALTIME);
        ao.timeout_s = opt.timeout_s;
        ao.stale_after_s = opt.dead_after_s;
        const Analysis a = analyze(job.snaps, ao);
        last_analysis_s = double(mono_ns() - now) / 1e9;
        job.last_analysis_cost_s = last_analysis_s;
        ++st_analyses;

        job.named.clear();
        bool stalled = false, fresh = false;
        std::set<std::string> keys;
        for (const auto& ref : a.all_verdicts()) {
            const auto& v = *ref.verdict;
            if (v.kind == verdict::Kind::Straggler) continue;
            auto& named = job.named[v.comm_id];
            named.first.insert(v.culprits.begin(), v.culprits.end());
            named.second.insert(v.waiting.begin(), v.waiting.end());
            stalled = stalled || is_stall(v.kind);
            const std::string k = verdict_key(v);
            keys.insert(k);
            if (!job.reported.count(k)) fresh = true;
        }
        if (fresh) {
            job.reported.insert(keys.begin(), keys.end());
            report(job, a, now);
            if (stalled && !job.stall_reported_ns) job.stall_reported_ns = now;
        }
        if (!stalled && job.stall_reported_ns) {
            log(fmt::format("job {}: recovered: no stall any more ({:.1f} s after the report)", clean(job.id),
                            double(now - job.stall_reported_ns) / 1e9));
            job.stall_reported_ns = 0;
            // A later stall at the same place is news again; mismatches stay reported once.
            for (auto it = job.reported.begin(); it != job.reported.end();)
                it = it->rfind("MISMATCH|", 0) == 0 ? std::next(it) : job.reported.erase(it);
        }
    }

    std::string clock_line(const Job& job) const {
        size_t exact = 0, est = 0;
        int64_t worst = 0;
        for (const auto& r : job.ranks) {
            if (r.clock.exact)
                ++exact;
            else if (r.clock.count) {
                ++est;
                worst = std::max(worst, r.clock.spread());
            }
        }
        return fmt::format(
            "clock offsets: {} rank(s) on this host's boot (exact), {} estimated by a one-way minimum filter over "
            "the last {} frames (each estimate is late by that rank's smallest one-way network delay; the "
            "widest window spread is {:.3f} ms)",
            exact, est, OffsetFilter::kWindow, double(worst) / 1e6);
    }

    void report(Job& job, const Analysis& a, uint64_t now) {
        ++st_reports;
        const auto refs = a.all_verdicts();
        const std::string job_name = job.id.empty() ? "(no job id)" : clean(job.id);
        const uint64_t real = clock_ns(CLOCK_REALTIME);
        std::string text;
        std::string first_line;
        for (const auto& ref : refs) {
            if (ref.verdict->kind == verdict::Kind::Straggler && !first_line.empty()) continue;
            const auto& v = *ref.verdict;
            const std::string line =
                fmt::format("{}: {} (comm {})", verdict::kind_name(v.kind), clean(v.summary), report::hex(v.comm_id));
            if (first_line.empty()) first_line = line;
            text += line + "\n";
            for (const auto& e : v.evidence) text += "    " + clean(e) + "\n";
        }
        text = fmt::format("ncclwatch live report, job {}, {}\n", job_name, report::wall_time(real)) + text;
        text += clock_line(job) + "\n";
        const uint64_t job_now = a.jobs.empty() ? now : a.jobs.front().now_mono_ns;
        for (const auto& jr : a.jobs) {
            for (const auto& cr : jr.comms) {
                text += fmt::format("\ncomm {}{} ({} ranks{})\n", report::hex(cr.comm_id),
                                    cr.name.empty() ? "" : " '" + clean(cr.name) + "'", cr.view.nranks,
                                    cr.missing.empty() ? "" : ", missing " + format_ranks(cr.missing));
                text += fmt::format("  {:>6} {:>6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10}  {}\n", "rank", "global",
                                    "host", "pid", "issued", "reached", "completed", "idle s", "state");
                size_t rows = 0;
                for (const auto& r : cr.view.ranks) {
                    if (++rows > kMaxTableRows) {
                        text += fmt::format("  ... {} more ranks (see live-report.json)\n",
                                            cr.view.ranks.size() - kMaxTableRows);
                        break;
                    }
                    const double idle = r.t_last_progress_ns && job_now > r.t_last_progress_ns
                                            ? double(job_now - r.t_last_progress_ns) / 1e9
                                            : 0.0;
                    const char* state = r.exited_clean     ? "exited"
                                        : !r.alive         ? "GONE"
                                        : r.stall_since_ns ? "stalled"
                                                           : "alive";
                    text += fmt::format("  {:>6} {:>6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10.1f}  {}\n", r.comm_rank,
                                        r.global_rank, clean(r.host).substr(0, 24), r.pid, r.issued, r.reached,
                                        r.completed, idle, state);
                }
            }
        }

        // Text first: it is small (the table is capped) and what a person or a script watches for.
        const std::string dir = opt.out_dir.empty() ? "" : opt.out_dir + "/" + safe_component(job.id);
        bool wrote = !dir.empty() && mkdirs(dir) && write_file(dir + "/live-report.txt", text);
        if (!dir.empty() && !wrote) log(fmt::format("cannot write the report into {}: {}", dir, strerror(errno)));
        if (!opt.quiet) {
            fwrite(text.data(), 1, text.size(), stdout);
            fflush(stdout);
        } else {
            log(fmt::format("job {}: {}", job_name, first_line));
        }

        json j;
        j["schema"] = "ncclwatch.live/1";
        j["job_id"] = job.id;
        j["time"] = report::wall_time(real);
        j["timeout_s"] = opt.timeout_s;
        j["dead_after_s"] = opt.dead_after_s;
        json verdicts = json::array();
        for (const auto& ref : refs) verdicts.push_back(report::verdict_json(*ref.verdict, job.id));
        j["verdicts"] = std::move(verdicts);
        json ranks = json::array();
        for (size_t i = 0; i < job.ranks.size(); ++i) {
            const auto& r = job.ranks[i];
            const auto& h = job.snaps[i].header;
            ranks.push_back(json{{"global_rank", h.global_rank},
                                 {"host", h.host},
                                 {"pid", h.pid},
                                 {"connected", r.conn_id != 0},
                                 {"exited_clean", r.bye},
                                 {"seconds_since_last_frame", double(now - r.last_frame_ns) / 1e9},
                                 {"clock_offset_ns", r.clock.offset()},
                                 {"clock_offset_exact", r.clock.exact},
                                 {"clock_offset_spread_ns", r.clock.spread()}});
        }
        j["ranks"] = std::move(ranks);
        json comms = json::array();
        for (const auto& jr : a.jobs)
            for (const auto& cr : jr.comms) {
                json rows = json::array();
                for (const auto& r : cr.view.ranks)
                    rows.push_back(json{{"comm_rank", r.comm_rank},
                                        {"global_rank", r.global_rank},
                                        {"host", r.host},
                                        {"pid", r.pid},
                                        {"alive", r.alive},
                                        {"issued", r.issued},
                                        {"reached", r.reached},
                                        {"completed", r.completed}});
                comms.push_back(json{{"comm_id", report::hex(cr.comm_id)},
                                     {"name", cr.name},
                                     {"nranks", cr.view.nranks},
                                     {"missing", cr.missing},
                                     {"ranks", std::move(rows)}});
            }
        j["comms"] = std::move(comms);
        j["warnings"] = a.warnings.size() > 100
                            ? json(std::vector<std::string>(a.warnings.begin(), a.warnings.begin() + 100))
                            : json(a.warnings);

        if (wrote) {
            if (write_file(dir + "/live-report.json", report::dump_json(j) + "\n"))
                log(
                    fmt::format("job {}: report written to {}/live-report.txt and .json ({:.3f} s after the analysis "
                                "started)",
                                job_name, dir, double(mono_ns() - now) / 1e9));
            else
                log(fmt::format("cannot write {}/live-report.json: {}", dir, strerror(errno)));
        }

        if (!opt.request_dumps) return;
        wire::DumpRequest dr;
        dr.request_id = ++request_id;
        dr.reason = first_line.substr(0, wire::kMaxString);
        std::vector<uint8_t> f;
        wire::encode(dr, f);
        for (auto& r : job.ranks) {
            if (!r.conn_id) continue;
            auto it = conns.find(r.conn_id);
            if (it != conns.end()) queue(*it->second, f);
            ++job.dump_requests;
        }
    }

    // ---- the loop ----

    void sweep(uint64_t now) {
        const uint64_t limit = uint64_t(opt.hello_timeout_s * 1e9);
        std::vector<uint64_t> idle;
        for (const auto& [id, c] : conns)
            if ((c->http || !c->hello) && now - c->opened_ns > limit) idle.push_back(id);
        for (uint64_t id : idle) {
            auto it = conns.find(id);
            if (it == conns.end()) continue;
            if (!it->second->http) log_peer(*it->second, "no Hello within the hello timeout");
            close_conn(id);
        }
    }

    void run() noexcept {
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
                    if (id == kWakeId) continue;
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
                if (now - last_sweep >= 1'000'000'000ull) {
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

    void close_all() {
        std::vector<uint64_t> ids;
        for (const auto& [id, c] : conns) ids.push_back(id);
        for (uint64_t id : ids) close_conn(id);
        for (int* fd : {&listen_fd, &metrics_fd, &wake_fd, &epfd, &spare_fd})
            if (*fd >= 0) close(*fd), *fd = -1;
    }
};

LiveServer::LiveServer(ServerOptions opt) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(opt); }

LiveServer::~LiveServer() { stop(); }

bool LiveServer::start(std::string* err) noexcept {
    try {
        Impl& m = *impl_;
        if (m.started) return true;
        m.boot = this_boot_id_hash();
        m.hostname = this_hostname();
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
    const uint64_t one = 1;
    if (write(m.wake_fd, &one, sizeof one) < 0) {
    }
    if (m.thread.joinable()) m.thread.join();
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
    s.port = m.port;
    s.metrics_port = m.metrics_port;
    return s;
}

}  // namespace ncw::live

// Loopback clients of the live collector (lib/live/live_server.h) for its unit tests: wire frames, /metrics, and
// a log sink to assert on.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "live/live_auth.h"
#include "live/live_server.h"
#include "ncclwatch/format.h"
#include "read/time_base.h"
#include "read/wire.h"
#include "temp_dir.h"

namespace {

using namespace ncw;
namespace fs = std::filesystem;

uint64_t mono() { return time_base::clock_ns(CLOCK_MONOTONIC); }

bool wait_until(const std::function<bool()>& cond, double seconds = 10) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
        if (cond()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return cond();
}

// Log lines of the server, collected for assertions.
struct Log {
    std::mutex mu;
    std::vector<std::string> lines;
    std::function<void(const std::string&)> sink() {
        return [this](const std::string& l) {
            std::lock_guard<std::mutex> g(mu);
            lines.push_back(l);
        };
    }
    bool has(const std::string& s) {
        std::lock_guard<std::mutex> g(mu);
        for (const auto& l : lines)
            if (l.find(s) != std::string::npos) return true;
        return false;
    }
    size_t count(const std::string& s) {
        std::lock_guard<std::mutex> g(mu);
        size_t n = 0;
        for (const auto& l : lines) n += l.find(s) != std::string::npos;
        return n;
    }
};

// The next whole frame on `fd` (what `reader` holds first, then what arrives): false on timeout or at the peer's close.
inline bool read_frame(int fd, wire::FrameReader& reader, wire::FrameHeader& h, std::vector<uint8_t>& payload,
                       double seconds) {
    std::string err;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
        if (reader.next(h, payload, &err) == wire::FrameReader::Status::Frame) return true;
        const int left =
            int(std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
        if (left <= 0) return false;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) return false;
        uint8_t buf[65536];
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) return false;
        reader.feed(buf, size_t(n));
    }
}

struct Client {
    int fd = -1;
    wire::FrameReader reader;
    // as_uid >= 0: the socket is that user's (made under that fsuid, which takes root: can_be_other_user() first), as a
    // process of that user's would be, while this process still holds it. from: the local address to connect from
    // ("127.0.0.2": another peer of this host, still loopback).
    explicit Client(uint16_t port, int as_uid = -1, const char* from = nullptr) {
        if (as_uid >= 0) setfsuid(uid_t(as_uid));
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (as_uid >= 0) setfsuid(geteuid());
        if (from) {
            sockaddr_in local{};
            local.sin_family = AF_INET;
            REQUIRE(inet_pton(AF_INET, from, &local.sin_addr) == 1);
            REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0);
        }
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    }
    ~Client() {
        if (fd >= 0) close(fd);
    }
    void send_bytes(const std::vector<uint8_t>& b) {
        REQUIRE(send(fd, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
    }
    template <class T>
    void send_msg(const T& m) {
        std::vector<uint8_t> b;
        wire::encode(m, b);
        send_bytes(b);
    }
    // The next frame from the collector; false on timeout or when the collector closed the connection.
    bool next(wire::FrameHeader& h, std::vector<uint8_t>& payload, double seconds = 10) {
        return read_frame(fd, reader, h, payload, seconds);
    }
    // true once the collector closed the connection (reads see EOF or a reset).
    bool closed_by_peer(double seconds = 10) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        uint8_t buf[4096];
        while (std::chrono::steady_clock::now() < end) {
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, 50) <= 0) continue;
            const ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return true;
        }
        return false;
    }
};

// Whether sockets of another user can be made here (Client's as_uid): root only. Tests that need one say so and skip.
inline bool can_be_other_user() {
    if (geteuid() == 0) return true;
    WARN("SKIP: not root: a socket of another user cannot be made here, so that check is not run");
    return false;
}

HeaderInfo header(int rank, int world, const std::string& job = "job-live") {
    HeaderInfo h;
    h.major = disk::kFormatMajor;
    h.minor = disk::kFormatMinor;
    h.pid = 900000 + rank;  // no such process here, but the host name is not ours: never probed
    h.global_rank = rank;
    h.world_size = world;
    h.host = "remote-node-" + std::to_string(rank);
    h.job_id = job;
    h.start_mono_ns = mono();
    h.boot_id_hash = 0xabcdef;  // another boot: offsets are estimated
    h.heartbeat_mono_ns = mono();
    h.process_state = uint32_t(disk::ProcessState::Running);
    return h;
}

wire::Hello hello(int rank, int world, const std::string& token = "") {
    wire::Hello m;
    m.token = token;
    m.header = header(rank, world);
    m.file = "/tmp/rank" + std::to_string(rank) + ".ncw";
    return m;
}

wire::Digest digest(int rank, int world, uint64_t issued, uint64_t completed, uint64_t t_progress) {
    wire::Digest d;
    d.sent_mono_ns = mono();
    d.process_state = uint32_t(disk::ProcessState::Running);
    CommInfo c;
    c.state = uint32_t(disk::CommState::Active);
    c.rank = rank;
    c.nranks = world;
    c.comm_id = 0x77;
    c.coll_issued = issued;
    c.coll_returned = issued;
    c.coll_reached = issued;
    c.coll_completed = completed;
    c.t_init_start_ns = 1;
    c.t_init_done_ns = 2;
    c.t_last_issue_ns = t_progress;
    c.t_last_progress_ns = t_progress;
    c.gpu_tracking = 1;
    for (uint64_t s = 1; s <= issued; ++s) {
        SigInfo g;
        g.seq = s;
        g.count = 1024;
        g.op = uint8_t(disk::OpType::AllReduce);
        g.dtype = 7;
        g.t_issue_ns = t_progress;
        c.recent.push_back(g);
    }
    d.comms.push_back(c);
    return d;
}

live::ServerOptions options(Log& log, const std::string& out_dir = "") {
    live::ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.timeout_s = 0.3;
    o.dead_after_s = 0.5;
    o.analyze_period_s = 0.05;
    o.idle_analysis_s = 0.05;  // the tests wait on analyses as conditions: at the test's pace, not the default 1 s
    o.out_dir = out_dir;
    o.quiet = true;
    o.log = log.sink();
    return o;
}

// A frame header alone: what a client that sends a frame's start and then stops sends first.
inline std::vector<uint8_t> frame_header(wire::FrameType type, uint32_t len) {
    std::vector<uint8_t> h(16, 0);
    const uint32_t magic = wire::kMagic;
    const uint16_t major = wire::kMajor, t = uint16_t(type);
    memcpy(&h[0], &magic, 4);
    memcpy(&h[4], &major, 2);
    memcpy(&h[8], &t, 2);
    memcpy(&h[12], &len, 4);
    return h;
}

bool expect_ack(Client& c) {
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    return c.next(h, p) && h.type == uint16_t(wire::FrameType::HelloAck);
}

// Ranks 0..n-1 of an n-rank job, each on its own connection to `port`, each Hello answered.
inline std::vector<std::unique_ptr<Client>> connect_ranks(uint16_t port, int n) {
    std::vector<std::unique_ptr<Client>> ranks;
    for (int r = 0; r < n; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, n));
        REQUIRE(expect_ack(*ranks.back()));
    }
    return ranks;
}

// A Hello as a 1.2 rank says it: the token never in it; a Challenge answered with the proof (none without a token).
// The type of the collector's last reply (HelloAck or Reject; 0 = none), its reason in *reason.
inline uint16_t say_hello(Client& c, const wire::Hello& m, const std::string& token, std::string* reason = nullptr) {
    wire::Hello clear = m;
    clear.token.clear();
    std::vector<uint8_t> frame;
    wire::encode(clear, frame);
    c.send_bytes(frame);
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    if (!c.next(h, p)) return 0;
    if (h.type == uint16_t(wire::FrameType::Challenge)) {
        wire::Challenge ch;
        std::string err;
        REQUIRE(wire::decode(p.data(), p.size(), ch, &err));
        wire::Proof proof;
        if (!token.empty()) {
            const live::Digest32 d = live::token_proof(token, ch.nonce, frame.data() + wire::kHeaderBytes,
                                                       frame.size() - wire::kHeaderBytes);
            proof.mac.assign(d.begin(), d.end());
        }
        c.send_msg(proof);
        if (!c.next(h, p)) return 0;
    }
    if (h.type == uint16_t(wire::FrameType::Reject) && reason) {
        wire::Reject r;
        std::string err;
        if (wire::decode(p.data(), p.size(), r, &err)) *reason = r.reason;
    }
    return h.type;
}

// Whether a report (live-report.json, parsed; not an object when it could not be) has a verdict of `kind`.
inline bool any_kind(const nlohmann::json& j, const std::string& kind) {
    if (!j.is_object() || !j.contains("verdicts")) return false;
    for (const auto& v : j["verdicts"])
        if (v["kind"] == kind) return true;
    return false;
}

inline std::string http_get(uint16_t port, const std::string& request) {
    Client c(port);
    c.send_bytes(std::vector<uint8_t>(request.begin(), request.end()));
    std::string out;
    uint8_t buf[65536];
    for (;;) {
        pollfd p{c.fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0) break;
        const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(reinterpret_cast<char*>(buf), size_t(n));
    }
    return out;
}

}  // namespace

// The live collector (lib/live/live_server.h) against clients that speak the wire protocol over loopback: verdicts
// reported once with dump requests, the token, malformed and hostile frames, dead ranks, /metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

struct Client {
    int fd = -1;
    wire::FrameReader reader;
    explicit Client(uint16_t port) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
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
        std::string err;
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (;;) {
            if (reader.next(h, payload, &err) == wire::FrameReader::Status::Frame) return true;
            const int left = int(
                std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
            if (left <= 0) return false;
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, left) <= 0) return false;
            uint8_t buf[65536];
            const ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return false;
            reader.feed(buf, size_t(n));
        }
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
    o.out_dir = out_dir;
    o.quiet = true;
    o.log = log.sink();
    return o;
}

bool expect_ack(Client& c) {
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    return c.next(h, p) && h.type == uint16_t(wire::FrameType::HelloAck);
}

std::string http_get(uint16_t port, const std::string& request) {
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

TEST_CASE("live server names the rank that never issued, writes the report once and asks every rank for a dump") {
    TempDir dir("ncw_live");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    // Ranks 0 and 1 wait in AllReduce #5; rank 2 completed #4 and never issued #5.
    std::vector<std::unique_ptr<Client>> ranks;
    const uint64_t t = mono();
    for (int r = 0; r < 3; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, 3));
        REQUIRE(expect_ack(*ranks.back()));
        ranks.back()->send_msg(r == 2 ? digest(r, 3, 4, 4, t) : digest(r, 3, 5, 4, t));
    }
    for (auto& c : ranks) {
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        REQUIRE(c->next(h, p));
        REQUIRE(h.type == uint16_t(wire::FrameType::DumpRequest));
        wire::DumpRequest dr;
        REQUIRE(wire::decode(p.data(), p.size(), dr, &err));
        CHECK(dr.reason.find("NOT_JOINED") != std::string::npos);
    }
    const fs::path json_path = dir.path / "job-live" / "live-report.json";
    REQUIRE(fs::exists(json_path));
    std::ifstream in(json_path);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["schema"] == "ncclwatch.live/1");
    CHECK(j["verdicts"][0]["kind"] == "NOT_JOINED");
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({2}));
    std::ifstream txt(dir.path / "job-live" / "live-report.txt");
    std::stringstream ss;
    ss << txt.rdbuf();
    CHECK(ss.str().find("NOT_JOINED") != std::string::npos);
    CHECK(ss.str().find("clock offsets") != std::string::npos);

    // Still stalled: no second report.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(srv.stats().reports == 1);

    // Rank 2 catches up and everyone completes #5: recovered.
    const uint64_t t2 = mono();
    for (int r = 0; r < 3; ++r) ranks[size_t(r)]->send_msg(digest(r, 3, 5, 5, t2));
    CHECK(wait_until([&] { return log.has("recovered"); }));
    CHECK(srv.stats().bad_frames == 0);
}

TEST_CASE("live server: a rank whose connection drops and whose frames stop is DEAD after the grace") {
    Log log;
    TempDir dir("ncw_live");
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    const uint64_t t = mono();
    Client a(port), b(port);
    a.send_msg(hello(0, 2));
    b.send_msg(hello(1, 2));
    REQUIRE(expect_ack(a));
    REQUIRE(expect_ack(b));
    a.send_msg(digest(0, 2, 3, 2, t));
    b.send_msg(digest(1, 2, 3, 2, t));
    // Both inside #3: whatever is reported first, rank 1 dying must end in a DEAD verdict naming it.
    close(b.fd);
    b.fd = -1;
    REQUIRE(wait_until([&] {
        std::ifstream in(dir.path / "job-live" / "live-report.json");
        if (!in) return false;
        try {
            const auto j = nlohmann::json::parse(in);
            for (const auto& v : j["verdicts"])
                if (v["kind"] == "DEAD" && v["culprits"] == nlohmann::json::array({1})) return true;
        } catch (...) {
        }
        return false;
    }));
}

TEST_CASE("live server closes a connection whose first frame is not Hello, or that sends garbage; others go on") {
    Log log;
    live::LiveServer srv(options(log));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    Client good(port);
    good.send_msg(hello(0, 2));
    REQUIRE(expect_ack(good));

    Client no_hello(port);
    no_hello.send_msg(digest(1, 2, 1, 1, mono()));
    CHECK(no_hello.closed_by_peer());

    Client garbage(port);
    garbage.send_bytes(std::vector<uint8_t>(64, 0x41));
    CHECK(garbage.closed_by_peer());

    // A valid header announcing a payload over the limit: closed without waiting for the bytes.
    Client huge(port);
    huge.send_msg(hello(1, 2));
    REQUIRE(expect_ack(huge));
    std::vector<uint8_t> h(16, 0);
    const uint32_t magic = wire::kMagic, len = wire::kMaxPayload + 1;
    const uint16_t major = wire::kMajor, type = uint16_t(wire::FrameType::Digest);
    memcpy(&h[0], &magic, 4);
    memcpy(&h[4], &major, 2);
    memcpy(&h[8], &type, 2);
    memcpy(&h[12], &len, 4);
    huge.send_bytes(h);
    CHECK(huge.closed_by_peer());

    CHECK(wait_until([&] { return srv.stats().bad_frames == 3; }));
    CHECK(log.count("closed connection from 127.0.0.1") == 3);
    // The good connection is still served.
    good.send_msg(wire::KeepAlive{mono()});
    good.send_msg(digest(0, 2, 1, 1, mono()));
    CHECK(wait_until([&] { return srv.stats().connections == 1; }));
    CHECK(!good.closed_by_peer(0.2));
}

TEST_CASE("live server with a token rejects a rank without it") {
    Log log;
    auto opt = options(log);
    opt.token = "s3cret";
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    Client wrong(port);
    wrong.send_msg(hello(0, 1, "nope"));
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    REQUIRE(wrong.next(h, p));
    CHECK(h.type == uint16_t(wire::FrameType::Reject));
    CHECK(wrong.closed_by_peer());
    CHECK(log.has("wrong token"));

    Client right(port);
    right.send_msg(hello(0, 1, "s3cret"));
    CHECK(expect_ack(right));
}

TEST_CASE("live server drops a connection that never says Hello") {
    Log log;
    auto opt = options(log);
    opt.hello_timeout_s = 0.2;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    Client silent(srv.stats().port);
    CHECK(silent.closed_by_peer(5));
    CHECK(log.has("no Hello"));
}

TEST_CASE("live server serves /metrics and nothing else") {
    Log log;
    auto opt = options(log);
    opt.metrics_listen = "127.0.0.1:0";
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const auto st = srv.stats();
    REQUIRE(st.metrics_port != 0);

    Client r(st.port);
    r.send_msg(hello(0, 2));
    REQUIRE(expect_ack(r));
    r.send_msg(digest(0, 2, 7, 6, mono()));
    REQUIRE(wait_until([&] { return srv.stats().frames >= 2; }));

    const std::string ok = http_get(st.metrics_port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(ok.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    CHECK(ok.find("ncclwatch_coll_issued{job=\"job-live\",rank=\"0\"") != std::string::npos);
    CHECK(ok.find("comm=\"0x0000000000000077\",comm_rank=\"0\"} 7\n") != std::string::npos);
    CHECK(ok.find("ncclwatch_connected{") != std::string::npos);
    CHECK(ok.find("ncclwatch_collector_frames_total ") != std::string::npos);

    CHECK(http_get(st.metrics_port, "GET / HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 404", 0) == 0);
    CHECK(http_get(st.metrics_port, "POST /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 404", 0) == 0);
    const std::string big = "GET /metrics HTTP/1.0\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
    // Refused and closed (the reply may be lost to the reset that closing with unread input sends).
    const std::string refused = http_get(st.metrics_port, big);
    CHECK((refused.empty() || refused.rfind("HTTP/1.0 431", 0) == 0));
}

TEST_CASE("live server refuses an address it cannot bind") {
    Log log;
    auto opt = options(log);
    opt.listen = "not-an-address";
    live::LiveServer srv(opt);
    std::string err;
    CHECK(!srv.start(&err));
    CHECK(err.find("HOST:PORT") != std::string::npos);
}

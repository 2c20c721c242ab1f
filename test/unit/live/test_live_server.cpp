// The live collector (lib/live/live_server.h) against clients that speak the wire protocol over loopback: verdicts
// reported once with dump requests, the token, malformed and hostile frames, dead ranks, /metrics.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "live_test_client.h"

namespace {

// `world` ranks of a job where the last never issued #5 and the others wait in it: a verdict, and so a report, once
// the timeout has passed.
std::vector<std::unique_ptr<Client>> last_rank_behind(uint16_t port, int world) {
    std::vector<std::unique_ptr<Client>> ranks;
    const uint64_t t = mono();
    for (int r = 0; r < world; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, world));
        REQUIRE(expect_ack(*ranks.back()));
        ranks.back()->send_msg(r == world - 1 ? digest(r, world, 4, 4, t) : digest(r, world, 5, 4, t));
    }
    return ranks;
}

}  // namespace

TEST_CASE("live server names the rank that never issued, writes the report once and asks every rank for a dump") {
    // Judged on the loop's thread (a small job), and on the analysis thread (a large one's way).
    const double offload_s = GENERATE(0.05, 0.0);
    TempDir dir("ncw_live");
    Log log;
    auto o = options(log, dir.path.string());
    o.offload_analysis_s = offload_s;
    o.metrics_listen = "127.0.0.1:0";
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    auto scrape = [&] { return http_get(srv.stats().metrics_port, "GET /metrics HTTP/1.0\r\n\r\n"); };

    // Ranks 0 and 1 wait in AllReduce #5; rank 2 completed #4 and never issued #5.
    const auto ranks = last_rank_behind(port, 3);
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
    // /metrics names who holds the communicator up, for the stall alert (docs/monitoring/alerts.yml): rank 2, its
    // host, the op.
    const std::string culprit =
        R"(ncclwatch_stall_culprit_info{job_id="job-live",comm="0x0000000000000077",kind="NOT_JOINED",)"
        R"(culprit_rank="2",culprit_host="remote-node-2",op="AllReduce #5"} 1)"
        "\n";
    CHECK(scrape().find(culprit) != std::string::npos);

    // Still stalled: no second report.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(srv.stats().reports == 1);

    // Rank 2 catches up and everyone completes #5: recovered.
    const uint64_t t2 = mono();
    for (int r = 0; r < 3; ++r) ranks[size_t(r)]->send_msg(digest(r, 3, 5, 5, t2));
    CHECK(wait_until([&] { return log.has("recovered"); }));
    CHECK(srv.stats().bad_frames == 0);
    // Recovered: nobody is named any more.
    CHECK(wait_until([&] { return scrape().find("ncclwatch_stall_culprit_info{") == std::string::npos; }));
}

TEST_CASE("live server: a rank whose connection drops and whose frames stop is DEAD after the grace") {
    const double offload_s = GENERATE(0.05, 0.0);
    Log log;
    TempDir dir("ncw_live");
    auto o = options(log, dir.path.string());
    o.offload_analysis_s = offload_s;
    live::LiveServer srv(o);
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
    opt.metrics_listen = "127.0.0.1:0";
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    Client wrong(port);
    std::string reason;
    CHECK(say_hello(wrong, hello(0, 1), "nope", &reason) == uint16_t(wire::FrameType::Reject));
    CHECK(reason == "token refused");
    CHECK(wrong.closed_by_peer());
    CHECK(log.has("wrong token"));

    Client none(port);
    CHECK(say_hello(none, hello(0, 1), "", &reason) == uint16_t(wire::FrameType::Reject));
    CHECK(none.closed_by_peer());
    CHECK(log.has("no token"));

    // A 1.1 rank sends the token in clear: refused, and told why.
    Client old(port);
    std::vector<uint8_t> f;
    wire::encode(hello(0, 1, "s3cret"), f);
    f[6] = 1;  // minor 1
    old.send_bytes(f);
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    REQUIRE(old.next(h, p));
    REQUIRE(h.type == uint16_t(wire::FrameType::Reject));
    wire::Reject r;
    REQUIRE(wire::decode(p.data(), p.size(), r, &err));
    CHECK(r.reason.find("1.1 sends the token in clear") != std::string::npos);
    CHECK(r.reason.find("upgrade") != std::string::npos);
    CHECK(!(h.flags & wire::kFlagRetry));
    CHECK(old.closed_by_peer());

    // A proof made for another Hello (another rank) does not pass.
    Client replay(port);
    std::vector<uint8_t> mine;
    wire::encode(hello(0, 1), mine);
    replay.send_bytes(mine);
    REQUIRE(replay.next(h, p));
    REQUIRE(h.type == uint16_t(wire::FrameType::Challenge));
    wire::Challenge ch;
    REQUIRE(wire::decode(p.data(), p.size(), ch, &err));
    std::vector<uint8_t> other;
    wire::encode(hello(1, 2), other);
    const auto d = live::token_proof("s3cret", ch.nonce, other.data() + 16, other.size() - 16);
    replay.send_msg(wire::Proof{std::string(d.begin(), d.end())});
    REQUIRE(replay.next(h, p));
    CHECK(h.type == uint16_t(wire::FrameType::Reject));

    Client right(port);
    CHECK(say_hello(right, hello(0, 1), "s3cret") == uint16_t(wire::FrameType::HelloAck));
    // With a token, /metrics names no job, communicator or pid.
    right.send_msg(digest(0, 1, 3, 3, mono()));
    std::string body;
    CHECK(wait_until([&] {
        body = http_get(srv.stats().metrics_port, "GET /metrics HTTP/1.0\r\n\r\n");
        return body.find("ncclwatch_coll_issued_total{") != std::string::npos;
    }));
    CHECK(body.find(header(0, 1).job_id) == std::string::npos);
    CHECK(body.find("job_id=\"job-") != std::string::npos);
    CHECK(body.find("pid") == std::string::npos);
}

TEST_CASE("live server binds a rank to its connection: a second Hello is refused and never kicks the first") {
    Log log;
    auto opt = options(log);
    opt.dead_after_s = 30;  // the first connection stays alive for the whole test
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    Client first(port);
    CHECK(say_hello(first, hello(1, 2), "") == uint16_t(wire::FrameType::HelloAck));
    for (int i = 0; i < 20; ++i) {
        Client impostor(port);
        wire::Hello m = hello(1, 2);
        m.header.pid = 31337;
        std::string reason;
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        impostor.send_msg(m);
        REQUIRE(impostor.next(h, p));
        REQUIRE(h.type == uint16_t(wire::FrameType::Reject));
        wire::Reject r;
        REQUIRE(wire::decode(p.data(), p.size(), r, &err));
        CHECK((h.flags & wire::kFlagRetry) != 0);
        CHECK(r.reason.find("already connected") != std::string::npos);
        CHECK(impostor.closed_by_peer());
    }
    CHECK(log.has("a second Hello while the rank's connection from 127.0.0.1"));
    CHECK(log.count("a second Hello") <= 12);  // rate-limited
    // The first still holds the rank.
    first.send_msg(wire::KeepAlive{mono()});
    CHECK(!first.closed_by_peer(0.3));
    CHECK(srv.stats().connections == 1);
}

TEST_CASE("live server without a token takes its own user's ranks and those it allows; the refusal names the option") {
    // Issue 45, item 3: a collector that runs as a service user refused every other user's ranks for good.
    if (!can_be_other_user()) return;
    const bool allowed = GENERATE(false, true);
    Log log;
    auto opt = options(log);
    opt.prove_peers = opt.own_uid_only = true;  // as `serve` without a token
    opt.allow_option = "--allow-uid";
    if (allowed) opt.allowed_uids = {65534};
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    // Both sockets made before either Hello: one walk of this process's descriptors proves both (the collector
    // rations its walks of one pid).
    Client own(port);
    Client other(port, 65534);  // user 65534's socket (its pid proof alone would pass: this process holds it)
    // The collector's own user, the pid its own: taken. (Not when the other is to be taken too: one process is one
    // rank, and this process holds both sockets.)
    wire::Hello m = hello(0, 2);
    m.header.pid = getpid();
    if (!allowed) CHECK(say_hello(own, m, "") == uint16_t(wire::FrameType::HelloAck));
    wire::Hello o = hello(1, 2);
    o.header.pid = getpid();
    std::string reason;
    const uint16_t answer = say_hello(other, o, "", &reason);
    if (allowed) {
        INFO(reason);
        CHECK(answer == uint16_t(wire::FrameType::HelloAck));
        CHECK(srv.stats().claims_refused == 0);
    } else {
        CHECK(answer == uint16_t(wire::FrameType::Reject));
        CHECK_THAT(reason,
                   Catch::StartsWith("identity refused: runs as uid 65534") && Catch::Contains("--allow-uid 65534"));
        CHECK(wait_until([&] { return log.has("start the collector with --allow-uid 65534"); }));
        CHECK(srv.stats().claims_refused == 1);
    }
}

TEST_CASE("live server keeps two jobs under one id apart by their rendezvous, never mixing their ranks") {
    // NCCLWATCH_JOB_ID=train given to two jobs at once (issue 45): the second's ranks were refused as taken, its
    // verdict came late and was judged on the first's environment.
    Log log;
    auto opt = options(log);
    opt.dead_after_s = 30;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    auto of_job = [](int rank, const char* master_port) {
        wire::Hello m = hello(rank, 2, "");
        m.header.job_id = "train";
        m.header.env = {"MASTER_ADDR=10.0.0.1", std::string("MASTER_PORT=") + master_port};
        m.header.pid += std::atoi(master_port);
        return m;
    };
    Client a0(port), a1(port), b0(port), b1(port);
    CHECK(say_hello(a0, of_job(0, "29500"), "") == uint16_t(wire::FrameType::HelloAck));
    CHECK(say_hello(a1, of_job(1, "29500"), "") == uint16_t(wire::FrameType::HelloAck));
    // The second job's rank 0 is not the first's taken rank 0: a job of its own.
    CHECK(say_hello(b0, of_job(0, "29600"), "") == uint16_t(wire::FrameType::HelloAck));
    CHECK(say_hello(b1, of_job(1, "29600"), "") == uint16_t(wire::FrameType::HelloAck));
    CHECK(srv.stats().connections == 4);
    CHECK(log.count("a second job under this id") == 1);
    CHECK(log.has("kept apart as job train~"));
    // A true second Hello for a rank of the first job is still refused.
    Client again(port);
    CHECK(say_hello(again, of_job(1, "29500"), "") == uint16_t(wire::FrameType::Reject));
}

TEST_CASE("live server sets aside a counter its rank's process could not have reached in its life, and says so") {
    // Issue 45: coll_issued 2^40 (under 2^52) from a rank that started a moment ago lost the culprit.
    TempDir dir("ncw_live");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    std::vector<std::unique_ptr<Client>> ranks;
    const uint64_t t = mono();
    for (int r = 0; r < 3; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, 3));
        REQUIRE(expect_ack(*ranks.back()));
        wire::Digest d = r == 2 ? digest(r, 3, 4, 4, t) : digest(r, 3, 5, 4, t);
        if (r == 1) d.comms[0].coll_issued = uint64_t(1) << 40;
        ranks.back()->send_msg(d);
    }
    const fs::path json_path = dir.path / "job-live" / "live-report.json";
    REQUIRE(wait_until([&] { return fs::exists(json_path); }));
    std::ifstream in(json_path);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["verdicts"][0]["kind"] == "NOT_JOINED");
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({2}));
    bool named = false;
    for (const auto& w : j["warnings"])
        named = named || w.get<std::string>().find(
                             "coll_issued 1099511627776 is more than its process could have "
                             "issued in its life so far") != std::string::npos;
    CHECK(named);
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
    CHECK(ok.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
    CHECK(ok.find("ncclwatch_coll_issued_total{job_id=\"job-live\",rank=\"0\"") != std::string::npos);
    CHECK(ok.find("comm=\"0x0000000000000077\",comm_rank=\"0\"} 7\n") != std::string::npos);
    CHECK(ok.find("ncclwatch_connected{") != std::string::npos);
    CHECK(ok.find("ncclwatch_collector_frames_total ") != std::string::npos);
    CHECK(ok.find("ncclwatch_build_info{version=\"") != std::string::npos);
    CHECK(ok.find("# EOF") == std::string::npos);

    // A scraper that asks for OpenMetrics gets it: its content type, counter families without _total, # EOF last.
    const std::string om =
        http_get(st.metrics_port,
                 "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,"
                 "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n");
    CHECK(om.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    CHECK(om.find("\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n") !=
          std::string::npos);
    CHECK(om.find("# TYPE ncclwatch_coll_issued counter\n") != std::string::npos);
    CHECK(om.find("ncclwatch_coll_issued_total{job_id=\"job-live\",rank=\"0\"") != std::string::npos);
    CHECK(om.size() > 6);
    CHECK(om.substr(om.size() - 6) == "# EOF\n");
    // And Prometheus text again within the same second (the renderings are shared per format).
    const std::string again = http_get(st.metrics_port, "GET /metrics HTTP/1.0\r\nAccept: */*\r\n\r\n");
    CHECK(again.find("# TYPE ncclwatch_coll_issued_total counter\n") != std::string::npos);
    CHECK(again.find("# EOF") == std::string::npos);

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

// ---- the bounds (live_server_bounds.cpp; log_limiter.h) ----

TEST_CASE("live server closes a partly sent frame at the frame deadline, before or after the Hello") {
    Log log;
    auto opt = options(log);
    opt.frame_timeout_s = 0.3;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    Client after(port);
    after.send_msg(hello(0, 2));
    REQUIRE(expect_ack(after));
    auto start = frame_header(wire::FrameType::Digest, 1000);
    start.resize(start.size() + 100, 0);
    const auto t0 = std::chrono::steady_clock::now();
    after.send_bytes(start);
    Client before(port);  // half a Hello
    before.send_bytes(frame_header(wire::FrameType::Hello, 500));
    CHECK(after.closed_by_peer(5));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(took >= 0.25);
    CHECK(took < 2.0);
    CHECK(before.closed_by_peer(5));
    CHECK(log.count("frame not complete within the frame timeout") == 2);
    CHECK(wait_until([&] { return srv.stats().buffered_bytes == 0 && srv.stats().connections == 0; }));
}

TEST_CASE("live server: partly sent frames share one budget; the connection that goes over it is closed") {
    Log log;
    auto opt = options(log);
    opt.max_buffered_total = 100000;
    opt.max_conn_buffer = 70000;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    auto partial = [](uint32_t announce, size_t fill) {
        auto b = frame_header(wire::FrameType::Digest, announce);
        b.resize(b.size() + fill, 0);
        return b;
    };
    Client a(port), b(port), big(port);
    for (Client* c : {&a, &b, &big}) {
        c->send_msg(hello(c == &a ? 0 : c == &b ? 1 : 2, 3));
        REQUIRE(expect_ack(*c));
    }
    big.send_bytes(partial(90000, 80000));  // over the per-connection cap
    CHECK(big.closed_by_peer(5));
    CHECK(log.has("a frame of more than 70000 bytes"));
    a.send_bytes(partial(90000, 60000));
    REQUIRE(wait_until([&] { return srv.stats().buffered_bytes >= 60016; }));
    b.send_bytes(partial(90000, 50000));  // 110 kB in all: over
    CHECK(b.closed_by_peer(5));
    CHECK(log.has("over the collector's budget"));
    CHECK(!a.closed_by_peer(0.2));
    CHECK(srv.stats().buffered_bytes == 60016);
}

TEST_CASE("live server forgets a job whose ranks all said Bye, and a silent one after the retention") {
    Log log;
    auto opt = options(log);
    opt.metrics_listen = "127.0.0.1:0";
    opt.retention_s = 1.5;
    opt.max_jobs = 2;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const auto st = srv.stats();
    {
        Client r0(st.port), r1(st.port);
        r0.send_msg(hello(0, 2));
        r1.send_msg(hello(1, 2));
        REQUIRE(expect_ack(r0));
        REQUIRE(expect_ack(r1));
        r0.send_msg(digest(0, 2, 3, 3, mono()));
        r1.send_msg(digest(1, 2, 3, 3, mono()));
        REQUIRE(wait_until(
            [&] { return http_get(st.metrics_port, "GET /metrics\r\n\r\n").find("job-live") != std::string::npos; }));
        std::vector<uint8_t> bye;
        wire::encode_bye(bye);
        r0.send_bytes(bye);
        r1.send_bytes(bye);
        CHECK(wait_until([&] { return srv.stats().evicted_jobs == 1; }, 5));
    }
    CHECK(srv.stats().ranks_known == 0);
    CHECK(http_get(st.metrics_port, "GET /metrics\r\n\r\n").find("job-live") == std::string::npos);

    // A table full of jobs whose ranks went away does not lock a new job out; nor do connected jobs that show no
    // progress (issue 28, point 4: the oldest goes); jobs whose counts grow do.
    auto job_hello = [](const std::string& job) {
        auto m = hello(0, 1);
        m.header.job_id = job;
        return m;
    };
    {
        Client a(st.port), b(st.port);
        a.send_msg(job_hello("a"));
        b.send_msg(job_hello("b"));
        REQUIRE(expect_ack(a));
        REQUIRE(expect_ack(b));
        Client n(st.port);
        n.send_msg(job_hello("n"));
        CHECK(expect_ack(n));  // "a", held open without progress, made room
        CHECK(a.closed_by_peer(2));
        CHECK(log.has("job a: forgotten"));
    }
    REQUIRE(wait_until([&] { return srv.stats().connections == 0; }));
    REQUIRE(wait_until([&] { return srv.stats().ranks_known == 0; }, 5));
    {
        Client a(st.port), b(st.port);
        a.send_msg(job_hello("a"));
        b.send_msg(job_hello("b"));
        REQUIRE(expect_ack(a));
        REQUIRE(expect_ack(b));
        const uint64_t f0 = srv.stats().frames;
        for (uint64_t done : {1, 2}) {
            a.send_msg(digest(0, 1, done, done, mono()));
            b.send_msg(digest(0, 1, done, done, mono()));
        }
        REQUIRE(wait_until([&] { return srv.stats().frames >= f0 + 4; }));  // both training
        Client c(st.port);
        c.send_msg(job_hello("c"));
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        REQUIRE(c.next(h, p));
        CHECK(h.type == uint16_t(wire::FrameType::Reject));
        CHECK(log.has("collector full"));
    }
    REQUIRE(wait_until([&] { return srv.stats().connections == 0; }));
    Client d(st.port);
    d.send_msg(job_hello("d"));
    CHECK(expect_ack(d));  // an idle job made room
    // The idle one left is forgotten after the retention; d, connected, stays.
    CHECK(wait_until([&] { return srv.stats().ranks_known == 1; }, 5));
    CHECK(!d.closed_by_peer(0.2));
}

TEST_CASE("live server caps /metrics, the ranks a verdict names first, and says how much it left out") {
    Log log;
    auto opt = options(log);
    opt.metrics_listen = "127.0.0.1:0";
    opt.metrics_max_bytes = 12000;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const auto st = srv.stats();
    Client r(st.port);
    r.send_msg(hello(0, 1));
    REQUIRE(expect_ack(r));
    auto d = digest(0, 1, 2, 2, mono());
    for (uint64_t k = 1; k < 64; ++k) {
        d.comms.push_back(d.comms.front());
        d.comms.back().comm_id = 0x1000 + k;
    }
    r.send_msg(d);
    REQUIRE(wait_until([&] { return srv.stats().frames >= 2; }));
    const std::string out = http_get(st.metrics_port, "GET /metrics HTTP/1.0\r\n\r\n");
    const size_t body_at = out.find("\r\n\r\n");
    REQUIRE(body_at != std::string::npos);
    const std::string body = out.substr(body_at + 4);
    CHECK(body.size() <= 12000);
    CHECK(out.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
    CHECK(body.find("ncclwatch_coll_issued_total{") != std::string::npos);
    CHECK(body.find("ncclwatch_collector_metrics_series_dropped 0\n") == std::string::npos);
    CHECK(body.find("ncclwatch_collector_metrics_series_dropped ") != std::string::npos);
    CHECK(body.find("ncclwatch_collector_frames_total ") != std::string::npos);
}

TEST_CASE("live server logs bad clients rate-limited per cause; a wrong token always gets through") {
    Log log;
    auto opt = options(log);
    opt.token = "s3cret";
    opt.log_summary_s = 0.3;
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    for (int i = 0; i < 40; ++i) {
        Client junk(port);
        std::vector<uint8_t> b(32, uint8_t(i));
        junk.send_bytes(b);
        CHECK(junk.closed_by_peer());
    }
    CHECK(log.count("bad magic") <= 12);
    CHECK(srv.stats().log_suppressed >= 28);
    Client wrong(port);
    CHECK(say_hello(wrong, hello(0, 1), "nope") == uint16_t(wire::FrameType::Reject));
    CHECK(wrong.closed_by_peer());
    CHECK(wait_until([&] { return log.has("wrong token"); }));
    CHECK(wait_until([&] { return log.has("left out by the rate limits") && log.has("bad magic: "); }));
}

TEST_CASE("live server names a job whose every rank has the wrong token, and a real rank a flood claimed first") {
    // Issue 45: a flood of wrong-token Hellos hid both.
    Log log;
    auto opt = options(log);
    opt.token = "s3cret";
    live::LiveServer srv(opt);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    // The flood: 3,000 one-off jobs, each claimed once with a wrong token (more than the table holds).
    for (int i = 0; i < 3000; ++i) {
        Client c(port);
        wire::Hello m = hello(0, 2);
        m.header.job_id = "flood-" + std::to_string(i);
        say_hello(c, m, "nope");
    }
    // A real job, every rank of it with the wrong token: named, once.
    for (int attempt = 0; attempt < 2; ++attempt)
        for (int r = 0; r < 2; ++r) {
            Client c(port);
            wire::Hello m = hello(r, 2);
            m.header.job_id = "train-wrong-token";
            CHECK(say_hello(c, m, "old-token") == uint16_t(wire::FrameType::Reject));
        }
    CHECK(wait_until([&] { return log.has("ranks of job train-wrong-token, of which no rank has the right one"); }));
    CHECK(log.count("ranks of job train-wrong-token") == 1);

    // A known job (rank 0 with the right token); the flood claims its rank 1 first, from elsewhere: the real rank 1
    // with a wrong token is still named.
    Client ok(port);
    CHECK(say_hello(ok, hello(0, 2), "s3cret") == uint16_t(wire::FrameType::HelloAck));
    for (int i = 0; i < 3; ++i) {
        Client flood(port, -1, "127.0.0.2");  // another address of this host
        wire::Hello m = hello(1, 2);
        m.header.pid = 4242;
        CHECK(say_hello(flood, m, "nope") == uint16_t(wire::FrameType::Reject));
    }
    CHECK(wait_until([&] { return log.count("for job job-live rank 1") == 1; }));
    Client real(port);
    CHECK(say_hello(real, hello(1, 2), "old-token") == uint16_t(wire::FrameType::Reject));
    CHECK(wait_until([&] { return log.count("for job job-live rank 1") == 2; }));
}

TEST_CASE("live server writes its report through a fresh temporary file, never through a planted symlink") {
    TempDir dir("ncw_live");
    const fs::path job = dir.path / "job-live";
    fs::create_directories(job);
    const fs::path victim = dir.path / "victim";
    { std::ofstream(victim) << "victim\n"; }
    fs::create_symlink(victim, job / "live-report.txt");
    fs::create_symlink(victim, job / "live-report.txt.tmp");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    const auto ranks = last_rank_behind(port, 2);
    REQUIRE(wait_until([&] { return fs::exists(job / "live-report.json"); }));
    std::ifstream in(victim);
    std::string v;
    std::getline(in, v);
    CHECK(v == "victim");
    CHECK(!fs::is_symlink(job / "live-report.txt"));
    struct stat sb {};
    REQUIRE(lstat((job / "live-report.txt").c_str(), &sb) == 0);
    const mode_t mask = umask(0);
    umask(mask);
    CHECK((sb.st_mode & 0777) == (0640 & ~mask));
    // The job folder was made by someone else first (its name is the job's, known ahead): not said, as it is ours.
    CHECK_FALSE(log.has("not the collector's alone"));
}

// Issue 28, point 7: a job folder made first by someone else, writable by all without the sticky bit, can have its
// reports replaced: the collector says so once for the job, and writes the reports.
TEST_CASE("live server says once that a job's report folder others can write to is not its alone") {
    TempDir dir("ncw_live");
    const fs::path job = dir.path / "job-live";
    fs::create_directories(job);
    REQUIRE(chmod(job.c_str(), 0777) == 0);
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    const auto ranks = last_rank_behind(port, 2);
    REQUIRE(wait_until([&] { return fs::exists(job / "live-report.json"); }));
    CHECK(log.has("job job-live: the report folder is not the collector's alone: " + job.string() +
                  " is writable by everyone (mode 0777) without the sticky bit"));
    size_t said = 0;
    {
        std::lock_guard<std::mutex> g(log.mu);
        for (const auto& l : log.lines) said += l.find("not the collector's alone") != std::string::npos;
    }
    CHECK(said == 1);
}

TEST_CASE("live server withholds its verdicts while it reads the ranks' frames late, and gives them once caught up") {
    TempDir dir("ncw_live");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    auto ranks = connect_ranks(srv.stats().port, 3);
    const uint64_t t = mono() - 2'000'000'000ull;  // stalled for 2 s already (timeout 0.3 s)
    // Rank 0's digest reaches the collector 3 s after it was sent: what it holds is 3 s old.
    for (int r = 0; r < 3; ++r) {
        wire::Digest d = r == 2 ? digest(r, 3, 4, 4, t) : digest(r, 3, 5, 4, t);
        if (r == 0) d.sent_mono_ns = mono() - 3'000'000'000ull;
        ranks[size_t(r)]->send_msg(d);
    }
    REQUIRE(wait_until([&] { return log.has("s late"); }));
    CHECK(srv.stats().reports == 0);
    // Caught up: its next frame is read as it is sent.
    ranks[0]->send_msg(wire::KeepAlive{mono()});
    // The report names rank 2 (read until it is there: the count goes up before the file is written).
    CHECK(wait_until([&] {
        std::ifstream in(dir.path / "job-live" / "live-report.json");
        try {
            return in && nlohmann::json::parse(in)["verdicts"][0]["culprits"] == nlohmann::json::array({2});
        } catch (...) {
            return false;
        }
    }));
    CHECK(srv.stats().reports == 1);
}

TEST_CASE("live server audits the environment again only when a process or its GPUs changed, and keeps what it found") {
    const double offload_s = GENERATE(0.05, 0.0);
    TempDir dir("ncw_live");
    Log log;
    auto o = options(log, dir.path.string());
    o.offload_analysis_s = offload_s;
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    const auto hello_algo = [](int r, const std::string& algo, int64_t pid) {
        wire::Hello m = hello(r, 2);
        m.header.env = {"NCCL_ALGO=" + algo};
        m.header.pid = pid;
        return m;
    };
    const auto report_text = [&] {
        std::ifstream txt(dir.path / "job-live" / "live-report.txt");
        std::stringstream ss;
        ss << txt.rdbuf();
        return ss.str();
    };

    // Rank 1 runs with another NCCL_ALGO and never issues #5.
    std::vector<std::unique_ptr<Client>> ranks;
    for (int r = 0; r < 2; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello_algo(r, r == 1 ? "Tree" : "Ring", 900000 + r));
        REQUIRE(expect_ack(*ranks.back()));
    }
    uint64_t t = mono();
    ranks[0]->send_msg(digest(0, 2, 5, 4, t));
    ranks[1]->send_msg(digest(1, 2, 4, 4, t));
    REQUIRE(wait_until([&] { return srv.stats().reports == 1; }));
    INFO(report_text());
    CHECK(report_text().find("NCCL_ALGO") != std::string::npos);

    // Recovered, then a stall at #6: the processes are the same, the audit is the one found before.
    t = mono();
    for (int r = 0; r < 2; ++r) ranks[size_t(r)]->send_msg(digest(r, 2, 5, 5, t));
    REQUIRE(wait_until([&] { return log.has("recovered"); }));
    t = mono();
    ranks[0]->send_msg(digest(0, 2, 6, 5, t));
    REQUIRE(wait_until([&] { return srv.stats().reports == 2; }));
    CHECK(report_text().find("NCCL_ALGO") != std::string::npos);

    // Rank 1 restarts with the others' NCCL_ALGO: audited again, nothing differs now.
    ranks[1] = std::make_unique<Client>(port);
    ranks[1]->send_msg(hello_algo(1, "Ring", 950001));
    REQUIRE(expect_ack(*ranks[1]));
    t = mono();
    ranks[0]->send_msg(digest(0, 2, 7, 6, t));
    ranks[1]->send_msg(digest(1, 2, 6, 6, t));
    REQUIRE(wait_until([&] { return srv.stats().reports == 3; }));
    CHECK(report_text().find("NCCL_ALGO") == std::string::npos);
}

TEST_CASE("live server keeps a MISMATCH's signatures past the window: a later stall's report still has it first") {
    // Rank 3 broadcast where the others all-reduced at #3; NCCL completed it and the job went on for 100 ops, past the
    // 64 signatures the collector keeps per communicator, then stalled in #106. The stall's report leads with the
    // MISMATCH at #3, as `analyze` over the ranks' rings does (type_mismatch at two nodes, GPU run 45: the collector's
    // last report said ASYNC_ERROR r0 where `analyze` said MISMATCH r3).
    TempDir dir("ncw_live_pinned");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const auto ranks = connect_ranks(srv.stats().port, 4);
    const auto send_all = [&](uint64_t issued, uint64_t completed, bool lower_bounds) {
        const uint64_t t = mono();
        for (int r = 0; r < 4; ++r) {
            auto d = digest(r, 4, issued, completed, t);
            auto& sigs = d.comms[0].recent.mut();  // a digest's newest kMaxDigestSigs, as a rank sends them
            if (sigs.size() > wire::kMaxDigestSigs) sigs.erase(sigs.begin(), sigs.end() - wire::kMaxDigestSigs);
            for (auto& g : sigs)
                if (r == 3 && g.seq == 3) g.op = uint8_t(disk::OpType::Broadcast);
            if (lower_bounds) d.comms[0].gpu_source = uint32_t(disk::GpuSource::Events);
            ranks[size_t(r)]->send_msg(d);
        }
    };
    const fs::path path = dir.path / "job-live" / "live-report.json";
    const auto report = [&] {
        std::ifstream in(path);
        return nlohmann::json::parse(in, nullptr, false);
    };
    send_all(5, 5, false);
    REQUIRE(wait_until([&] { return fs::exists(path) && any_kind(report(), "MISMATCH"); }));
    for (uint64_t issued = 5 + wire::kMaxDigestSigs; issued <= 105; issued += wire::kMaxDigestSigs)
        send_all(issued, issued, false);
    send_all(106, 105, true);
    REQUIRE(wait_until([&] { return any_kind(report(), "UNKNOWN"); }));
    const auto j = report();
    CHECK(j["verdicts"][0]["kind"] == "MISMATCH");
    CHECK(j["verdicts"][0]["seq"] == 3);
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({3}));
    CHECK(j["verdicts"][0]["headline"].get<std::string>().find("issued Broadcast where the other ranks issued "
                                                               "AllReduce at #3") != std::string::npos);
}

TEST_CASE("live server finds a MISMATCH among a digest's earlier signatures, not only its newest (protocol 1.12)") {
    // 40 all-reduces between two digests (a communicator issuing 200 a second at 200 ms a digest): rank 3 broadcast
    // at #10, which is not among the newest 16 each digest carries.
    TempDir dir("ncw_live_earlier");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const auto ranks = connect_ranks(srv.stats().port, 4);
    const uint64_t t = mono();
    for (int r = 0; r < 4; ++r) {
        auto d = digest(r, 4, 40, 40, t);
        for (auto& g : d.comms[0].recent.mut())
            if (r == 3 && g.seq == 10) g.op = uint8_t(disk::OpType::Broadcast);
        ranks[size_t(r)]->send_msg(d);
    }
    const fs::path path = dir.path / "job-live" / "live-report.json";
    REQUIRE(wait_until([&] { return fs::exists(path); }));
    std::ifstream in(path);
    const auto j = nlohmann::json::parse(in);
    REQUIRE(!j["verdicts"].empty());
    CHECK(j["verdicts"][0]["kind"] == "MISMATCH");
    CHECK(j["verdicts"][0]["seq"] == 10);
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({3}));
}

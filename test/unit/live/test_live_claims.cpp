// The live collector's cost follows what its ranks sent, never what they claim (issue 45, item 2): a process is one
// rank, communicators whose absent ranks the job's reports do not justify are set aside, a rank and a job are held to
// budgets in bytes, and a proven rank takes the room of an unproven job however lively its counts.
#include <catch2/catch.hpp>

#include "live/admission.h"
#include "live/peer_proof.h"
#include "live_test_client.h"

namespace {

// Ranks that prove their pid: this process's own (the collector proves it holds the connection's socket).
wire::Hello own_hello(const std::string& job, int rank, int world) {
    wire::Hello m = hello(rank, world);
    m.header.job_id = job;
    m.header.pid = getpid();
    return m;
}

// A Digest of `n` communicators of `nranks` ranks each, this rank in #5 since two minutes, with `sigs` signatures.
wire::Digest claiming(int n, int nranks, int sigs = 0, uint64_t completed = 4) {
    wire::Digest d = digest(0, nranks, completed + 1, completed, mono() - 120'000'000'000ull);
    CommInfo base = d.comms[0];
    base.recent.mut().resize(std::min<size_t>(size_t(sigs), base.recent.size()));
    d.comms.clear();
    for (int k = 0; k < n; ++k) {
        d.comms.push_back(base);
        d.comms.back().comm_id = 0x1000 + uint64_t(k);
    }
    return d;
}

std::string reject_reason(Client& c) {
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    while (c.next(h, p, 5)) {
        if (h.type != uint16_t(wire::FrameType::Reject)) continue;
        wire::Reject r;
        std::string err;
        REQUIRE(wire::decode(p.data(), p.size(), r, &err));
        return r.reason;
    }
    return "";
}

// A relay's connection (protocol 1.7): each rank a channel; without a token its ranks are taken from a relay of the
// collector's own user on the relay's word (protocol 1.16), and prove nothing of themselves.
struct Relay {
    Client c;
    explicit Relay(uint16_t port) : c(port) {}
    template <class T>
    void send(uint32_t channel, const T& m) {
        // A Hello comes after what the relay found at the rank's socket (protocol 1.16): a process of our user, in
        // our pid namespace, that holds it.
        if constexpr (std::is_same_v<T, wire::Hello>) {
            wire::RelayPeer p;
            p.channel = channel;
            p.result = wire::RelayPeer::Proven;
            p.flags = wire::kPeerUidKnown;
            p.pid = m.header.pid;
            p.pid_ns = live::own_pid_namespace();
            p.uid = geteuid();
            std::vector<uint8_t> pf;
            wire::encode(p, pf);
            c.send_bytes(pf);
        }
        std::vector<uint8_t> inner, f;
        wire::encode(m, inner);
        wire::encode_relay(channel, inner.data(), inner.size(), f);
        c.send_bytes(f);
    }
    // The next frame of `channel` (unwrapped), its type; 0 on timeout.
    uint16_t next(uint32_t channel, std::string* reason = nullptr) {
        wire::FrameHeader h, inner;
        std::vector<uint8_t> p;
        std::string err;
        while (c.next(h, p, 5)) {
            uint32_t ch = 0;
            if (h.type != uint16_t(wire::FrameType::Relay) ||
                !wire::decode_relay(p.data(), p.size(), ch, inner, &err) || ch != channel)
                continue;
            if (inner.type == uint16_t(wire::FrameType::Reject) && reason) {
                wire::Reject r;
                const size_t at = wire::kRelayPrefixBytes + wire::kHeaderBytes;
                if (wire::decode(p.data() + at, p.size() - at, r, &err)) *reason = r.reason;
            }
            return inner.type;
        }
        return 0;
    }
};

}  // namespace

TEST_CASE("live server: the default budget of a rank holds the most a rank can send; a job's, 65,536 such ranks") {
    FileSnapshot most;
    CommInfo c;
    c.recent.mut().resize(disk::kRecentSigs);  // a digest's 64 at most, kept across digests up to the window
    c.gpu_spans.resize(wire::kMaxDigestSpans);
    c.pci_bus_id = "0000:00:00.0";
    most.comms.assign(wire::kMaxComms + wire::kMaxExtraComms, c);
    const live::ServerOptions o;
    CHECK(live::snapshot_bytes(most) <= o.max_rank_bytes);
    most.comms.resize(8);  // a rank of a large job: its world, data-, tensor- and pipeline-parallel groups, more
    CHECK(live::snapshot_bytes(most) * 65536 <= o.max_job_bytes);
}

TEST_CASE("live server: a process is one rank; its second (job, rank) is refused while the first is connected") {
    Log log;
    auto o = options(log);
    o.prove_peers = true;
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    auto first = std::make_unique<Client>(port);
    REQUIRE(say_hello(*first, own_hello("job-a", 0, 2), "") == uint16_t(wire::FrameType::HelloAck));
    Client second(port);
    std::string why;
    CHECK(say_hello(second, own_hello("job-b", 0, 2), "", &why) == uint16_t(wire::FrameType::Reject));
    CHECK(why.find("one process is one rank") != std::string::npos);
    Client third(port);  // the same process, another rank of the same job: no more a rank than a job of its own
    CHECK(say_hello(third, own_hello("job-a", 1, 2), "", &why) == uint16_t(wire::FrameType::Reject));
    CHECK(log.has("one process is one rank: pid " + std::to_string(getpid()) + " already speaks for job job-a rank 0"));
    CHECK(srv.stats().ranks_known == 1);

    // Its connection gone, the process may speak for a rank again (the shim of a process that reconnects).
    first.reset();
    CHECK(wait_until([&] {
        Client c(port);
        return say_hello(c, own_hello("job-b", 0, 2), "") == uint16_t(wire::FrameType::HelloAck);
    }));
}

TEST_CASE(
    "live server: a Digest of a thousand communicators of 65,536 ranks costs what it carried, not what it claims") {
    TempDir dir("ncw_live_claims");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    Client c(srv.stats().port);
    wire::Hello h = hello(0, 65536);
    h.header.job_id = "thousand";
    c.send_msg(h);
    REQUIRE(expect_ack(c));
    c.send_msg(claiming(1000, 65536));  // 65,535,000 ranks it never reported, in a frame of 270 KB
    CHECK(wait_until([&] { return log.has("job thousand: 1000 communicator(s) set aside, not analysed"); }));
    const uint64_t analyses = srv.stats().analyses;
    CHECK(wait_until([&] { return srv.stats().analyses > analyses + 2; }));  // and analysed again, as cheaply
    CHECK(srv.stats().state_bytes < 2 * 1000 * sizeof(CommInfo) + 64 * 1024);
    CHECK(srv.stats().reports == 0);
    CHECK_FALSE(fs::exists(dir.path / "thousand"));
}

TEST_CASE("live server sets aside communicators whose absent ranks the job's reports do not justify") {
    TempDir dir("ncw_live_claims");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    // One rank claims 64 communicators of 65,536 ranks, each stuck for two minutes: 4,194,240 ranks it never
    // reported, that sized every list of the analysis and the report (2.4 GB).
    Client fake(port);
    wire::Hello h = hello(0, 65536);
    h.header.job_id = "claims";
    fake.send_msg(h);
    REQUIRE(expect_ack(fake));
    fake.send_msg(claiming(64, 65536));
    CHECK(wait_until([&] { return log.has("job claims: 64 communicator(s) set aside, not analysed"); }));
    CHECK(log.has("(comm 0x0000000000001000 claims 65536 ranks, 1 reported)"));

    // Ranks that never connected are still judged where the job's reports justify them: three of four ranks wait in
    // #5, rank 3 was never heard from.
    std::vector<std::unique_ptr<Client>> ranks;
    const uint64_t t = mono();
    for (int r = 0; r < 3; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, 4));
        REQUIRE(expect_ack(*ranks.back()));
        ranks.back()->send_msg(digest(r, 4, 5, 4, t));
    }
    const fs::path real = dir.path / "job-live" / "live-report.json";
    REQUIRE(wait_until([&] { return fs::exists(real); }));
    std::ifstream in(real);
    const auto j = nlohmann::json::parse(in);
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({3}));
    CHECK(j["comms"][0]["missing"] == nlohmann::json::array({3}));
    // The claims made no report, and their state is what the frame carried.
    CHECK_FALSE(fs::exists(dir.path / "claims"));
    CHECK(srv.stats().state_bytes < (4u << 20));
}

TEST_CASE("live server holds a rank to its budget in bytes: past it, its communicators go and it is refused") {
    Log log;
    auto o = options(log);
    o.max_rank_bytes = 256 * 1024;
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    Client c(port);
    c.send_msg(hello(0, 2));
    REQUIRE(expect_ack(c));
    c.send_msg(claiming(4, 2, 16));  // well within
    REQUIRE(wait_until(
        [&] { return srv.stats().state_bytes > live::snapshot_bytes(FileSnapshot{}) + 4 * sizeof(CommInfo); }));
    const uint64_t within = srv.stats().state_bytes;
    CHECK(within < o.max_rank_bytes);
    c.send_msg(claiming(1000, 2, 16));  // 1,000 communicators of 16 signatures each: far more than 256 KiB
    CHECK(reject_reason(c).find("the rank's state is over its budget") != std::string::npos);
    CHECK(log.has("over a rank's budget of 262144 bytes (--max-rank-bytes): its communicators dropped"));
    CHECK(srv.stats().state_bytes < within);
}

TEST_CASE("live server holds a job to its budget in bytes: the rank that grew it is refused, then new ranks") {
    Log log;
    auto o = options(log);
    const size_t one = live::snapshot_bytes(FileSnapshot{});
    o.max_job_bytes = one * 5 / 2;  // two ranks that said Hello, not three
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    Client a(port), b(port), c(port);
    a.send_msg(hello(0, 4));
    REQUIRE(expect_ack(a));
    b.send_msg(hello(1, 4));
    REQUIRE(expect_ack(b));
    c.send_msg(hello(2, 4));
    CHECK(reject_reason(c) == "collector full for this job (memory budget)");
    CHECK(log.has("the job's state is at its budget of " + std::to_string(o.max_job_bytes) + " bytes"));
    a.send_msg(claiming(8, 4));
    CHECK(reject_reason(a) == "refused: the job's state is over its budget");
    CHECK(log.has("over a job's budget of " + std::to_string(o.max_job_bytes) + " bytes (--max-job-bytes)"));
    CHECK(srv.stats().state_bytes <= o.max_job_bytes);
}

TEST_CASE("live server: a proven rank takes the room of a training job none of whose ranks is proven") {
    Log log;
    auto o = options(log);
    o.prove_peers = true;
    o.max_jobs = 2;
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;

    // Two jobs on a relay of our own user (taken without a token, their pids unproven), each completing more.
    Relay relay(port);
    for (uint32_t ch = 1; ch <= 2; ++ch) {
        wire::Hello h = hello(0, 1);
        h.header.job_id = "lively-" + std::to_string(ch);
        h.header.pid += ch;  // a process each
        relay.send(ch, h);
        REQUIRE(relay.next(ch) == uint16_t(wire::FrameType::HelloAck));
        relay.send(ch, digest(0, 1, 100, 100, mono()));
        relay.send(ch, digest(0, 1, 101, 101, mono()));
    }
    REQUIRE(wait_until([&] { return srv.stats().frames >= 6; }));

    // Another unproven job finds the collector full: both jobs are training.
    wire::Hello third = hello(0, 1);
    third.header.job_id = "lively-3";
    third.header.pid += 3;
    relay.send(3, third);
    std::string why;
    CHECK(relay.next(3, &why) == uint16_t(wire::FrameType::Reject));
    CHECK(why == "collector full");

    // A rank that proves its pid does not: the training job heard from least recently gives way.
    Client real(port);
    CHECK(say_hello(real, own_hello("real-job", 0, 1), "") == uint16_t(wire::FrameType::HelloAck));
    CHECK(log.has("job lively-1: forgotten"));
    CHECK(srv.stats().evicted_jobs == 1);
}

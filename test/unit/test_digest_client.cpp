// The live digest client's pure parts: endpoints and the auto port, config of the live variables, the backoff, digest
// building and change detection, reading the process's own state (file and anonymous memory agree), and the send slot
// on a real socket (one frame at most, EPIPE without SIGPIPE).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>

#include "config.h"
#include "digest_client.h"
#include "rank_file_writer.h"
#include "temp_dir.h"

using namespace ncw;
using namespace ncw::live_client;

namespace {

Config parse(std::map<std::string, std::string> env, std::vector<std::string>& warnings) {
    return parse_config(
        [&](const char* n) -> const char* {
            auto it = env.find(n);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        warnings);
}

}  // namespace

TEST_CASE("parse_endpoint takes host:port and [v6]:port, and says what is wrong otherwise") {
    Endpoint ep;
    std::string err;
    REQUIRE(parse_endpoint("node0:29610", ep, &err));
    CHECK(ep.host == "node0");
    CHECK(ep.port == 29610);
    REQUIRE(parse_endpoint("10.1.2.3:1", ep, &err));
    CHECK(ep.host == "10.1.2.3");
    CHECK(ep.port == 1);
    REQUIRE(parse_endpoint("[::1]:65535", ep, &err));
    CHECK(ep.host == "::1");
    CHECK(ep.port == 65535);

    const std::map<std::string, std::string> bad = {
        {"node0", "no port"},         {"node0:", "not a number"},      {":29610", "no host"},
        {"node0:0", "1..65535"},      {"node0:65536", "1..65535"},     {"node0:12ab", "not a number"},
        {"::1:80", "needs brackets"}, {"[::1:80", "no closing"},       {"[::1]80", "no ':PORT'"},
        {"node0:-5", "not a number"}, {"node0:999999", "not a number"}};
    for (const auto& [in, why] : bad) {
        INFO(in);
        err.clear();
        CHECK_FALSE(parse_endpoint(in, ep, &err));
        CHECK_THAT(err, Catch::Contains(why) && Catch::Contains(in));
    }
}

TEST_CASE("the auto port: NCCLWATCH_COLLECTOR_PORT, else MASTER_PORT+1, else 29610") {
    CHECK(derive_auto_port(0, nullptr) == 29610);
    CHECK(derive_auto_port(0, "") == 29610);
    CHECK(derive_auto_port(0, "29500") == 29501);
    CHECK(derive_auto_port(0, "junk") == 29610);
    CHECK(derive_auto_port(0, "65535") == 29610);  // +1 would not be a port
    CHECK(derive_auto_port(4242, "29500") == 4242);
}

TEST_CASE("live variables: defaults, valid values, and clear messages for bad ones") {
    std::vector<std::string> w;
    SECTION("defaults") {
        Config c = parse({}, w);
        CHECK(w.empty());
        CHECK(c.collector.empty());
        CHECK(c.collector_port == 29610);
        CHECK(c.token.empty());
        CHECK(c.digest_ms == 200);
        CHECK(c.dead_after_sec == 10);
    }
    SECTION("valid") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "node0:1234"},
                          {"NCCLWATCH_TOKEN", "s3cret"},
                          {"NCCLWATCH_DIGEST_MS", "50"},
                          {"NCCLWATCH_DEAD_AFTER_SEC", "2.5"},
                          {"MASTER_PORT", "29500"}},
                         w);
        CHECK(w.empty());
        CHECK(c.collector == "node0:1234");
        CHECK(c.token == "s3cret");
        CHECK(c.digest_ms == 50);
        CHECK(c.dead_after_sec == 2.5);
        CHECK(c.collector_port == 29501);
    }
    SECTION("auto with an explicit port") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "auto"}, {"NCCLWATCH_COLLECTOR_PORT", "4000"}}, w);
        CHECK(w.empty());
        CHECK(c.collector == "auto");
        CHECK(c.collector_port == 4000);
    }
    SECTION("a bad collector address turns live digests off, saying why") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "node0"}}, w);
        REQUIRE(w.size() == 1);
        CHECK_THAT(w[0], Catch::Contains("NCCLWATCH_COLLECTOR") && Catch::Contains("no port") &&
                             Catch::Contains("live digests are off"));
        CHECK(c.collector.empty());
    }
    SECTION("out-of-range numbers keep their defaults") {
        Config c = parse(
            {{"NCCLWATCH_DIGEST_MS", "5"}, {"NCCLWATCH_COLLECTOR_PORT", "70000"}, {"NCCLWATCH_DEAD_AFTER_SEC", "x"}},
            w);
        CHECK(w.size() == 3);
        CHECK(c.digest_ms == 200);
        CHECK(c.collector_port == 29610);
        CHECK(c.dead_after_sec == 10);
        CHECK_THAT(w[0] + w[1] + w[2], Catch::Contains("10..10000"));
    }
}

TEST_CASE("the token's value is never recorded in the environment snapshot") {
    CHECK(is_secret_name("NCCLWATCH_TOKEN"));
    std::string var = "NCCLWATCH_TOKEN=s3cret";
    char* envp[] = {var.data(), nullptr};
    EnvList env = snapshot_env(envp);
    REQUIRE(env.size() == 1);
    CHECK(env[0].second == "<redacted>");
}

TEST_CASE("resolve_endpoint") {
    Config c;
    Endpoint ep;
    std::string err;
    CHECK_FALSE(resolve_endpoint(c, "node0", ep, &err));
    c.collector = "collector:9";
    REQUIRE(resolve_endpoint(c, nullptr, ep, &err));
    CHECK(ep.host == "collector");
    CHECK(ep.port == 9);
    c.collector = "auto";
    c.collector_port = 29501;
    CHECK_FALSE(resolve_endpoint(c, nullptr, ep, &err));
    CHECK_THAT(err, Catch::Contains("MASTER_ADDR"));
    REQUIRE(resolve_endpoint(c, "node0", ep, &err));
    CHECK(ep.host == "node0");
    CHECK(ep.port == 29501);
    REQUIRE(resolve_endpoint(c, "[fe80::1]", ep, &err));
    CHECK(ep.host == "fe80::1");
}

TEST_CASE("backoff doubles from 0.5 s to 30 s, with jitter in the upper half, and resets") {
    Backoff b(0.5, 30.0, 42);
    double prev_max = 0;
    for (int i = 0; i < 20; ++i) {
        const double want = std::min(30.0, 0.5 * double(1 << std::min(i, 20)));
        const double d = b.next_delay_s();
        INFO("attempt " << i << " delay " << d);
        CHECK(d >= want / 2);
        CHECK(d <= want);
        prev_max = std::max(prev_max, d);
    }
    CHECK(prev_max <= 30.0);
    b.reset();
    CHECK(b.next_delay_s() <= 0.5);
    // Two ranks with different seeds do not retry in lockstep.
    Backoff x(0.5, 30.0, 1), y(0.5, 30.0, 2);
    bool differ = false;
    for (int i = 0; i < 5; ++i) differ |= x.next_delay_s() != y.next_delay_s();
    CHECK(differ);
}

TEST_CASE("make_digest keeps the newest signatures; digest_changed ignores only the send time") {
    HeaderInfo h;
    h.process_state = 1;
    CommInfo c;
    c.comm_id = 7;
    c.coll_issued = 40;
    for (uint64_t s = 1; s <= 40; ++s) c.recent.push_back(SigInfo{s});
    wire::Digest d = make_digest(h, {c}, 1000);
    CHECK(d.sent_mono_ns == 1000);
    CHECK(d.process_state == 1);
    REQUIRE(d.comms.size() == 1);
    REQUIRE(d.comms[0].recent.size() == wire::kMaxDigestSigs);
    CHECK(d.comms[0].recent.back().seq == 40);
    CHECK(d.comms[0].recent.front().seq == 40 - wire::kMaxDigestSigs + 1);

    std::vector<uint8_t> a, b, e;
    wire::encode(d, a);
    d.sent_mono_ns = 2000;
    wire::encode(d, b);
    CHECK_FALSE(digest_changed(a, b));
    CHECK(digest_changed({}, b));
    d.comms[0].coll_completed = 39;
    wire::encode(d, e);
    CHECK(digest_changed(b, e));
}

TEST_CASE("the process's own state reads the same through its file and straight from the mapping") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 3;
    id.world_size = 4;
    id.host = "hostA";
    id.pid = getpid();
    id.job_id = "job1";
    RankFileWriter w = create_rank_file(dir.path.string(), id, 256, 0);
    REQUIRE(w.file_backed);
    w.hdr->num_comms.store(2);
    for (int i = 0; i < 2; ++i) {
        disk::CommSlot& s = w.comms[i];
        s.rank = 3;
        s.nranks = 4;
        s.comm_id = 100 + i;
        snprintf(s.name, sizeof s.name, "comm%d", i);
        s.state.store(uint32_t(disk::CommState::Active));
        s.coll_issued.store(70);
        s.coll_completed.store(69);
        for (uint64_t seq = 1; seq <= 70; ++seq) {
            disk::OpSignature& g = s.recent[seq % disk::kRecentSigs];
            g.seq.store(seq);
            g.count = seq * 10;
            g.op = uint8_t(disk::OpType::AllReduce);
        }
    }
    SelfReader from_file(w);
    REQUIRE(from_file.error().empty());
    RankFileWriter anon = w;
    anon.file_backed = false;
    SelfReader from_memory(anon);

    std::vector<uint8_t> a, b;
    wire::encode(make_digest(from_file.header(), from_file.comms(), 0), a);
    wire::encode(make_digest(from_memory.header(), from_memory.comms(), 0), b);
    CHECK(a == b);
    wire::Digest d;
    REQUIRE(wire::decode(a.data() + wire::kHeaderBytes, a.size() - wire::kHeaderBytes, d, nullptr));
    REQUIRE(d.comms.size() == 2);
    CHECK(d.comms[1].name == "comm1");
    CHECK(d.comms[1].recent.back().seq == 70);

    wire::Hello ha, hb;
    ha.header = from_file.header();
    hb.header = from_memory.header();
    a.clear();
    b.clear();
    wire::encode(ha, a);
    wire::encode(hb, b);
    CHECK(a == b);
    CHECK(ha.header.global_rank == 3);
    CHECK(ha.header.host == "hostA");
}

TEST_CASE("the send slot holds one frame, drains a non-blocking socket, and reports EPIPE without a signal") {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    SendSlot slot;
    std::string err;
    REQUIRE(slot.offer(std::vector<uint8_t>(1 << 20, 0xab)));  // far more than the socket buffers
    REQUIRE(slot.flush(sv[0], &err));
    CHECK(slot.busy());
    CHECK_FALSE(slot.offer(std::vector<uint8_t>(10, 1)));  // refused: the older frame is still leaving

    // The reader drains; the frame completes; the slot takes the next one.
    std::vector<uint8_t> got;
    uint8_t buf[65536];
    for (int i = 0; i < 100000 && got.size() < (1u << 20); ++i) {
        const ssize_t n = read(sv[1], buf, sizeof buf);
        if (n > 0) got.insert(got.end(), buf, buf + n);
        REQUIRE(slot.flush(sv[0], &err));
    }
    REQUIRE(got.size() == (1u << 20));
    CHECK_FALSE(slot.busy());
    CHECK(slot.offer(std::vector<uint8_t>(10, 1)));

    // The peer is gone: EPIPE comes back as an error; SIGPIPE (default action: kill) never fires.
    close(sv[1]);
    const auto old = signal(SIGPIPE, SIG_DFL);
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
        ok = slot.flush(sv[0], &err);
        if (ok && !slot.busy()) ok = slot.offer(std::vector<uint8_t>(10, 1)) && slot.flush(sv[0], &err);
    }
    CHECK_FALSE(ok);
    CHECK_FALSE(err.empty());
    signal(SIGPIPE, old);
    close(sv[0]);
}

// A node's relay (lib/live/relay.h) and the collector's side of it (protocol 1.7): ranks judged through a relay as
// through their own connections, what the collector sends a rank handed back to it alone, a channel closing as a
// socket would, a relay gone taking its ranks with it, and frames that do not belong on either side refused.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "live/peer_proof.h"
#include "live/relay.h"
#include "live_test_client.h"

namespace {

// The collector's side alone: a client that speaks as a relay, its ranks as channels.
struct RawRelay : Client {
    using Client::Client;
    uint16_t minor = wire::kMinor;  // what its frames say (an older relay's: below kMinorRelayProof)
    template <class T>
    void send_as(uint32_t channel, const T& m) {
        std::vector<uint8_t> inner, f;
        wire::encode(m, inner);
        wire::encode_relay(channel, inner.data(), inner.size(), f);
        std::memcpy(&f[6], &minor, 2);
        send_bytes(f);
    }
    void send_peer(const wire::RelayPeer& p) {
        std::vector<uint8_t> f;
        wire::encode(p, f);
        send_bytes(f);
    }
    // The collector's answer to a rank of `channel` (HelloAck or Reject, 0: none): the reason and retry of a Reject.
    uint16_t reply(uint32_t channel, std::string* reason = nullptr, bool* retry = nullptr) {
        for (;;) {
            uint32_t ch = 0;
            wire::FrameHeader ih;
            std::vector<uint8_t> p;
            if (!next_for(ch, ih, p)) return 0;
            if (ch != channel || ih.type == uint16_t(wire::FrameType::RelayClose)) continue;
            if (ih.type == uint16_t(wire::FrameType::Reject)) {
                wire::Reject r;
                std::string err;
                if (reason && wire::decode(p.data(), p.size(), r, &err)) *reason = r.reason;
                if (retry) *retry = (ih.flags & wire::kFlagRetry) != 0;
            }
            return ih.type;
        }
    }
    void close_channel(uint32_t channel) {
        std::vector<uint8_t> f;
        wire::encode_relay_close(channel, f);
        send_bytes(f);
    }
    // The next frame for a rank: its channel and the unwrapped frame (RelayClose: type RelayClose, no inner frame).
    bool next_for(uint32_t& channel, wire::FrameHeader& inner, std::vector<uint8_t>& payload) {
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        if (!next(h, p)) return false;
        std::string err;
        if (h.type == uint16_t(wire::FrameType::RelayClose)) {
            inner = h;
            return wire::decode_relay_close(p.data(), p.size(), channel, &err);
        }
        if (h.type != uint16_t(wire::FrameType::Relay) || !wire::decode_relay(p.data(), p.size(), channel, inner, &err))
            return false;
        payload.assign(p.begin() + wire::kRelayPrefixBytes + wire::kHeaderBytes, p.end());
        return true;
    }
    // The next n frames for ranks, each of type `want`: their payloads by channel.
    std::map<uint32_t, std::vector<uint8_t>> next_n(int n, wire::FrameType want) {
        std::map<uint32_t, std::vector<uint8_t>> got;
        for (int i = 0; i < n; ++i) {
            uint32_t ch = 0;
            wire::FrameHeader ih;
            std::vector<uint8_t> p;
            REQUIRE(next_for(ch, ih, p));
            REQUIRE(ih.type == uint16_t(want));
            got[ch] = std::move(p);
        }
        return got;
    }
};

std::set<uint32_t> channels(const std::map<uint32_t, std::vector<uint8_t>>& frames) {
    std::set<uint32_t> out;
    for (const auto& [ch, p] : frames) out.insert(ch);
    return out;
}

live::RelayOptions relay_options(uint16_t upstream, Log& log) {
    live::RelayOptions o;
    o.listen = "127.0.0.1:0";
    o.upstream = "127.0.0.1:" + std::to_string(upstream);
    o.log = log.sink();
    return o;
}

// What a relay of this process's user says of a rank it proved (protocol 1.16): process `pid` of user `uid` holds the
// rank's socket, in our pid namespace.
wire::RelayPeer proof_of(uint32_t channel, int64_t pid, uint32_t uid = geteuid()) {
    wire::RelayPeer p;
    p.channel = channel;
    p.result = wire::RelayPeer::Proven;
    p.flags = wire::kPeerUidKnown;
    p.pid = pid;
    p.pid_ns = live::own_pid_namespace();
    p.uid = uid;
    return p;
}

// A collector as `serve` runs it without a token: proofs required, its own user's ranks only.
live::ServerOptions proving(Log& log, const std::string& out_dir = "") {
    auto o = options(log, out_dir);
    o.prove_peers = o.own_uid_only = true;
    o.allow_option = "--allow-uid";
    return o;
}

// The collector's end of a relay's upstream, for a relay under test: a listener, and the frames of the one
// connection it accepts.
struct FakeCollector {
    int lfd = -1, fd = -1;
    uint16_t port = 0;
    wire::FrameReader reader;
    FakeCollector() {
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        REQUIRE(listen(lfd, 4) == 0);
        socklen_t len = sizeof a;
        REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        port = ntohs(a.sin_port);
    }
    ~FakeCollector() {
        if (fd >= 0) close(fd);
        close(lfd);
    }
    bool accept_one(double seconds = 10) {
        pollfd p{lfd, POLLIN, 0};
        if (poll(&p, 1, int(seconds * 1000)) <= 0) return false;
        fd = accept(lfd, nullptr, nullptr);
        return fd >= 0;
    }
    bool next(wire::FrameHeader& h, std::vector<uint8_t>& payload, double seconds = 10) {
        return read_frame(fd, reader, h, payload, seconds);
    }
    void send_bytes(const std::vector<uint8_t>& b) {
        REQUIRE(send(fd, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
    }
};

bool has_dead(const fs::path& report, int rank) {
    std::ifstream in(report);
    if (!in) return false;
    try {
        const auto j = nlohmann::json::parse(in);
        for (const auto& v : j["verdicts"])
            if (v["kind"] == "DEAD" && v["culprits"] == nlohmann::json::array({rank})) return true;
    } catch (...) {
    }
    return false;
}

}  // namespace

TEST_CASE("collector: ranks on a relay's channels are judged as on their own connections") {
    TempDir dir("ncw_relay");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    RawRelay relay(srv.stats().port);

    // Three ranks on channels 5, 6, 7: each Hello answered on its own channel.
    const uint64_t t = mono();
    for (int r = 0; r < 3; ++r) relay.send_as(uint32_t(5 + r), hello(r, 3));
    CHECK(channels(relay.next_n(3, wire::FrameType::HelloAck)) == std::set<uint32_t>{5, 6, 7});
    CHECK(srv.stats().ranks_known == 3);

    SECTION("a rank that never issued is named; each rank gets its own dump request") {
        for (int r = 0; r < 3; ++r)
            relay.send_as(uint32_t(5 + r), r == 2 ? digest(r, 3, 4, 4, t) : digest(r, 3, 5, 4, t));
        const auto asked = relay.next_n(3, wire::FrameType::DumpRequest);
        CHECK(channels(asked) == std::set<uint32_t>{5, 6, 7});
        for (const auto& [ch, p] : asked) {
            wire::DumpRequest dr;
            REQUIRE(wire::decode(p.data(), p.size(), dr, &err));
            CHECK(dr.reason.find("NOT_JOINED") != std::string::npos);
        }
        std::ifstream in(dir.path / "job-live" / "live-report.json");
        const auto j = nlohmann::json::parse(in);
        CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({2}));
        CHECK(srv.stats().bad_frames == 0);
    }
    SECTION("a channel the relay closes is a socket closing: that rank is DEAD after the grace, the others not") {
        for (int r = 0; r < 3; ++r) relay.send_as(uint32_t(5 + r), digest(r, 3, 3, 2, t));
        relay.close_channel(6);
        REQUIRE(wait_until([&] { return has_dead(dir.path / "job-live" / "live-report.json", 1); }));
    }
    SECTION("the relay's connection closing closes every rank on it") {
        for (int r = 0; r < 3; ++r) relay.send_as(uint32_t(5 + r), digest(r, 3, 3, 2, t));
        close(relay.fd);
        relay.fd = -1;
        REQUIRE(wait_until([&] { return srv.stats().connections == 0; }));
    }
    SECTION("a frame from a rank that breaks the protocol closes its channel only, and the relay is told") {
        relay.send_as(uint32_t(6), hello(1, 3));  // a second Hello on one connection
        uint32_t ch = 0;
        wire::FrameHeader ih;
        std::vector<uint8_t> p;
        REQUIRE(relay.next_for(ch, ih, p));
        CHECK(ih.type == uint16_t(wire::FrameType::RelayClose));
        CHECK(ch == 6);
        relay.send_as(uint32_t(5), wire::KeepAlive{mono()});
        CHECK(srv.stats().bad_frames == 1);
        CHECK(wait_until([&] { return log.has("second Hello on one connection"); }));
    }
    SECTION("a rank's connection may not carry relay frames") {
        Client rank(srv.stats().port);
        rank.send_msg(hello(3, 4));
        REQUIRE(expect_ack(rank));
        std::vector<uint8_t> inner, f;
        wire::encode(wire::KeepAlive{1}, inner);
        wire::encode_relay(1, inner.data(), inner.size(), f);
        rank.send_bytes(f);
        CHECK(rank.closed_by_peer());
        CHECK(wait_until([&] { return log.has("a relay's frame on a rank's connection"); }));
    }
    SECTION("a relay may only send relay frames") {
        relay.send_msg(wire::KeepAlive{1});
        CHECK(relay.closed_by_peer());
        CHECK(wait_until([&] { return log.has("on a relay's connection"); }));
    }
}

TEST_CASE("relay: a node's ranks reach the collector on one connection and hear back on their own") {
    TempDir dir("ncw_relay");
    Log slog, rlog;
    live::LiveServer srv(options(slog, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    live::Relay relay(relay_options(srv.stats().port, rlog));
    REQUIRE(relay.start(&err));
    REQUIRE(wait_until([&] { return relay.stats().upstream_up; }));
    CHECK(rlog.has("connected to the collector"));

    const uint16_t port = relay.stats().port;
    auto ranks = connect_ranks(port, 3);
    const uint64_t t = mono();
    // Ranks 0 and 1 wait in #5; rank 2 never issued it. Each rank's own connection gets its dump request.
    for (int r = 0; r < 3; ++r) ranks[size_t(r)]->send_msg(r == 2 ? digest(r, 3, 4, 4, t) : digest(r, 3, 5, 4, t));
    for (auto& c : ranks) {
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        REQUIRE(c->next(h, p));
        CHECK(h.type == uint16_t(wire::FrameType::DumpRequest));
    }
    std::ifstream in(dir.path / "job-live" / "live-report.json");
    CHECK(nlohmann::json::parse(in)["verdicts"][0]["culprits"] == nlohmann::json::array({2}));
    CHECK(relay.stats().ranks == 3);
    CHECK(relay.stats().frames_up >= 6);
    CHECK(relay.stats().frames_down >= 6);

    SECTION("a rank whose socket closes is closed at the collector too") {
        // The collector's count: the relay's connection and a channel per rank.
        CHECK(srv.stats().connections == 4);
        close(ranks[1]->fd);
        ranks[1]->fd = -1;
        CHECK(wait_until([&] { return srv.stats().connections == 3; }));
        CHECK(relay.stats().ranks == 2);
    }
    SECTION("a rank sending garbage is closed at the relay; the others go on") {
        ranks[0]->send_bytes(std::vector<uint8_t>(32, 0x41));
        CHECK(ranks[0]->closed_by_peer());
        ranks[1]->send_msg(wire::KeepAlive{mono()});
        CHECK(wait_until([&] { return relay.stats().ranks == 2; }));
    }
    SECTION("the collector going takes the node's rank connections with it; the relay comes back with it") {
        const uint16_t up = srv.stats().port;
        srv.stop();
        for (auto& c : ranks) CHECK(c->closed_by_peer());
        CHECK(wait_until([&] { return !relay.stats().upstream_up; }));
        CHECK(rlog.has("lost the collector"));
        // While it is down, a rank that connects is closed at once (its client retries with backoff).
        Client early(port);
        CHECK(early.closed_by_peer());
        Log slog2;
        auto o = options(slog2, dir.path.string());
        o.listen = "127.0.0.1:" + std::to_string(up);
        live::LiveServer again(o);
        REQUIRE(again.start(&err));
        REQUIRE(wait_until([&] { return relay.stats().upstream_up; }, 15));
        Client back(port);
        back.send_msg(hello(0, 3));
        CHECK(expect_ack(back));
    }
}

TEST_CASE("relay: bad options are clear messages") {
    Log log;
    std::string err;
    live::RelayOptions o;
    o.log = log.sink();
    o.listen = "127.0.0.1:0";
    o.upstream = "nowhere";
    live::Relay a(o);
    CHECK_FALSE(a.start(&err));
    CHECK(err.find("the collector's address") != std::string::npos);
    o.upstream = "127.0.0.1:1";
    o.listen = "not-an-address";
    live::Relay b(o);
    CHECK_FALSE(b.start(&err));
    CHECK(err.find("HOST:PORT") != std::string::npos);
}

TEST_CASE("collector without a token: a relay's ranks by the proof it forwards, each judged as a direct rank's") {
    // Issue 45, item 3: a relay of the collector's user carried any local user's ranks unproven.
    Log log;
    live::LiveServer srv(proving(log));
    std::string err;
    REQUIRE(srv.start(&err));
    RawRelay relay(srv.stats().port);
    // The relay's probe (a RelayClose of channel 0, no rank's), answered in kind: the collector speaks 1.16.
    relay.close_channel(0);
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    REQUIRE(relay.next(h, p));
    CHECK(h.type == uint16_t(wire::FrameType::RelayClose));
    CHECK(h.minor >= wire::kMinorRelayProof);
    uint32_t ch = 99;
    REQUIRE(wire::decode_relay_close(p.data(), p.size(), ch, &err));
    CHECK(ch == 0);

    std::string reason;
    bool retry = false;
    // Proven at the relay: our own process, our own user. Taken.
    relay.send_peer(proof_of(5, getpid()));
    relay.send_as(5, hello(0, 4));
    CHECK(relay.reply(5) == uint16_t(wire::FrameType::HelloAck));
    // No proof: as unproven as a direct rank that proves nothing.
    relay.send_as(6, hello(1, 4));
    CHECK(relay.reply(6, &reason) == uint16_t(wire::FrameType::Reject));
    CHECK(reason == "identity refused: its relay sent no proof of it");
    // Another user's rank (`nobody` through a relay of ours): refused, naming the option that would take it.
    relay.send_peer(proof_of(7, getpid(), 65534));
    relay.send_as(7, hello(2, 4));
    CHECK(relay.reply(7, &reason) == uint16_t(wire::FrameType::Reject));
    CHECK_THAT(reason,
               Catch::StartsWith("identity refused: runs as uid 65534") && Catch::Contains("--allow-uid 65534"));
    // Another process holds its socket: refused with what the relay found.
    auto refused = proof_of(8, 4242);
    refused.result = wire::RelayPeer::Refused;
    refused.why = "claims pid 31337, but its socket is held by pid 4242 (uid 0)";
    relay.send_peer(refused);
    relay.send_as(8, hello(3, 4));
    CHECK(relay.reply(8, &reason, &retry) == uint16_t(wire::FrameType::Reject));
    CHECK(reason == "identity refused: at its relay: " + refused.why);
    CHECK_FALSE(retry);
    // Not proven yet (the relay's ration of /proc walks spent): refused for now.
    auto later = proof_of(9, 0);
    later.result = wire::RelayPeer::Unproven;
    later.why = "cannot prove pid 77 now; retry later";
    relay.send_peer(later);
    relay.send_as(9, hello(3, 4));
    CHECK(relay.reply(9, &reason, &retry) == uint16_t(wire::FrameType::Reject));
    CHECK_THAT(reason, Catch::StartsWith("identity not proven yet: at its relay:"));
    CHECK(retry);
    // A proof after its rank's Hello changes nothing: the rank on channel 5 is still rank 0, and only once.
    relay.send_peer(proof_of(5, 4242, 65534));
    relay.send_as(5, wire::KeepAlive{mono()});
    CHECK(wait_until([&] { return srv.stats().claims_refused == 4; }));
    CHECK(srv.stats().ranks_known == 1);
    CHECK(srv.stats().bad_frames == 0);
}

TEST_CASE("collector without a token: an older relay proves none of its ranks, and the refusal says so") {
    Log log;
    live::LiveServer srv(proving(log));
    std::string err;
    REQUIRE(srv.start(&err));
    RawRelay relay(srv.stats().port);
    relay.minor = wire::kMinorRelayProof - 1;  // no probe, no RelayPeer: a 1.15 relay
    relay.send_as(5, hello(0, 2));
    std::string reason;
    CHECK(relay.reply(5, &reason) == uint16_t(wire::FrameType::Reject));
    CHECK_THAT(reason, Catch::Contains("its relay speaks protocol 1.15, which proves no rank (1.16 does)"));
    // With a token the ranks prove themselves, whatever the relay: unchanged.
    Log tlog;
    auto o = options(tlog);
    o.token = "relay-token";
    live::LiveServer tsrv(o);
    REQUIRE(tsrv.start(&err));
    RawRelay old(tsrv.stats().port);
    old.minor = wire::kMinorRelayProof - 1;
    old.send_as(5, hello(0, 2));
    wire::FrameHeader ih;
    std::vector<uint8_t> p;
    uint32_t ch = 0;
    REQUIRE(old.next_for(ch, ih, p));
    CHECK(ih.type == uint16_t(wire::FrameType::Challenge));
}

TEST_CASE("collector without a token: a relay of another user is taken only if allowed, for its own user's ranks") {
    if (!can_be_other_user()) return;
    const bool allowed = GENERATE(false, true);
    Log log;
    auto o = proving(log);
    if (allowed) o.allowed_uids = {65534};
    live::LiveServer srv(o);
    std::string err;
    REQUIRE(srv.start(&err));
    RawRelay relay(srv.stats().port, 65534);  // the relay's socket is user 65534's
    relay.close_channel(0);
    std::string reason;
    relay.send_peer(proof_of(5, getpid(), 65534));
    relay.send_as(5, hello(0, 2));
    if (!allowed) {
        CHECK(relay.reply(5, &reason) == uint16_t(wire::FrameType::Reject));
        CHECK_THAT(reason, Catch::StartsWith("identity refused: its relay runs as uid 65534") &&
                               Catch::Contains("--allow-uid 65534"));
        CHECK(wait_until([&] { return log.has("a user the collector does not take: its ranks are refused"); }));
        return;
    }
    CHECK(relay.reply(5) == uint16_t(wire::FrameType::HelloAck));
    // It could say anything of another user's process: it speaks for its own user's ranks only.
    relay.send_peer(proof_of(6, getpid(), geteuid()));
    relay.send_as(6, hello(1, 2));
    CHECK(relay.reply(6, &reason) == uint16_t(wire::FrameType::Reject));
    CHECK_THAT(reason, Catch::Contains("its relay runs as uid 65534 and speaks for that user's ranks only, not uid " +
                                       std::to_string(geteuid())));
}

TEST_CASE("collector: a relayed rank is the process its relay proved, never the pid it says") {
    // Issue 45, item 3: a pid said in a pid namespace the rank made itself named a process that is not the rank. The
    // process proven is probed for the rank's life (HeaderInfo::proven_pid; read/liveness.cpp, its unit test), and
    // the collector says which process that is where it differs from the pid said.
    Log log;
    live::LiveServer srv(proving(log));
    std::string err;
    REQUIRE(srv.start(&err));
    RawRelay relay(srv.stats().port);
    // Rank 0 says pid 7 (its pid in its container); its relay found process 4242 of ours at its socket.
    relay.send_peer(proof_of(5, 4242));
    wire::Hello m = hello(0, 3);
    m.header.pid = 7;
    relay.send_as(5, m);
    // Rank 1 says pid 8; its relay's pid namespace is another than ours: its pids are not ours to probe.
    auto elsewhere = proof_of(6, 4343);
    elsewhere.pid_ns = live::own_pid_namespace() + 1;
    relay.send_peer(elsewhere);
    m = hello(1, 3);
    m.header.pid = 8;
    relay.send_as(6, m);
    // Rank 2 is the pid it says.
    relay.send_peer(proof_of(7, getpid()));
    m = hello(2, 3);
    m.header.pid = getpid();
    relay.send_as(7, m);
    for (uint32_t c = 5; c <= 7; ++c) REQUIRE(relay.reply(c) == uint16_t(wire::FrameType::HelloAck));
    CHECK(wait_until([&] { return log.has("job job-live rank 0 from 127.0.0.1"); }));
    CHECK(log.has("pid 7 as it says (its own pid namespace's), pid 4242 here: that process's life is the rank's"));
    CHECK(log.has("rank 1 from 127.0.0.1"));
    CHECK(
        log.has("pid 8 as it says, in a pid namespace of its relay's that is not the collector's: its process is "
                "not probed here"));
    CHECK_FALSE(log.has("job job-live rank 2 from"));
}

TEST_CASE("relay: proves each rank's pid at its socket and forwards it; a false pid is refused at the collector") {
    Log slog, rlog;
    live::LiveServer srv(proving(slog));
    std::string err;
    REQUIRE(srv.start(&err));
    live::Relay relay(relay_options(srv.stats().port, rlog));
    REQUIRE(relay.start(&err));
    REQUIRE(wait_until([&] { return relay.stats().upstream_up; }));
    Client honest(relay.stats().port);
    wire::Hello m = hello(0, 2);
    m.header.pid = getpid();
    CHECK(say_hello(honest, m, "") == uint16_t(wire::FrameType::HelloAck));
    // A pid that does not hold its socket (31337 of the e2e impostors): refused, with what the relay found.
    Client liar(relay.stats().port);
    wire::Hello l = hello(1, 2);
    l.header.pid = 999999999;
    std::string reason;
    CHECK(say_hello(liar, l, "", &reason) == uint16_t(wire::FrameType::Reject));
    CHECK_THAT(reason, Catch::StartsWith("identity refused: at its relay: claims pid 999999999") &&
                           Catch::Contains(std::to_string(getpid())));
    CHECK(srv.stats().claims_refused == 1);
    CHECK(wait_until([&] { return slog.has("runs as uid " + std::to_string(geteuid()) + ": the proofs"); }));
    CHECK_FALSE(rlog.has("did not answer"));
}

TEST_CASE("relay: proofs go only to a collector that answers its probe; before its Hello, each rank's") {
    const bool answers = GENERATE(true, false);
    FakeCollector up;
    Log rlog;
    live::Relay relay(relay_options(up.port, rlog));
    std::string err;
    REQUIRE(relay.start(&err));
    REQUIRE(up.accept_one());
    wire::FrameHeader h;
    std::vector<uint8_t> p;
    // First: the probe, a RelayClose of channel 0.
    REQUIRE(up.next(h, p));
    REQUIRE(h.type == uint16_t(wire::FrameType::RelayClose));
    uint32_t ch = 99;
    REQUIRE(wire::decode_relay_close(p.data(), p.size(), ch, &err));
    CHECK(ch == 0);
    if (answers) {
        std::vector<uint8_t> f;
        wire::encode_relay_close(0, f);
        up.send_bytes(f);
    }
    // Ranks are taken once it is known whether the collector takes proofs: at once, or after a second of silence
    // (an older collector ignores the probe).
    REQUIRE(wait_until([&] { return relay.stats().upstream_up; }, 5));
    CHECK(rlog.has("did not answer the relay's probe") == !answers);
    Client rank(relay.stats().port);
    wire::Hello m = hello(0, 1);
    m.header.pid = getpid();
    rank.send_msg(m);
    REQUIRE(up.next(h, p));
    if (answers) {
        REQUIRE(h.type == uint16_t(wire::FrameType::RelayPeer));
        wire::RelayPeer peer;
        REQUIRE(wire::decode(p.data(), p.size(), peer, &err));
        CHECK(peer.result == wire::RelayPeer::Proven);
        CHECK(peer.pid == getpid());
        CHECK(peer.pid_ns == live::own_pid_namespace());
        CHECK(peer.uid == geteuid());
        CHECK(peer.gid == getegid());
        CHECK(peer.flags == (wire::kPeerUidKnown | wire::kPeerGidKnown));
        ch = peer.channel;
        REQUIRE(up.next(h, p));
    }
    REQUIRE(h.type == uint16_t(wire::FrameType::Relay));
    wire::FrameHeader inner;
    uint32_t hello_ch = 0;
    REQUIRE(wire::decode_relay(p.data(), p.size(), hello_ch, inner, &err));
    CHECK(inner.type == uint16_t(wire::FrameType::Hello));
    if (answers) CHECK(hello_ch == ch);
    // Its later frames go as they come, with no proof of their own.
    rank.send_msg(wire::KeepAlive{mono()});
    REQUIRE(up.next(h, p));
    CHECK(h.type == uint16_t(wire::FrameType::Relay));
}

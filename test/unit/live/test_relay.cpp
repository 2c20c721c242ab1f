// A node's relay (lib/live/relay.h) and the collector's side of it (protocol 1.7): ranks judged through a relay as
// through their own connections, what the collector sends a rank handed back to it alone, a channel closing as a
// socket would, a relay gone taking its ranks with it, and frames that do not belong on either side refused.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "live/relay.h"
#include "live_test_client.h"

namespace {

// The collector's side alone: a client that speaks as a relay, its ranks as channels.
struct RawRelay : Client {
    using Client::Client;
    template <class T>
    void send_as(uint32_t channel, const T& m) {
        std::vector<uint8_t> inner, f;
        wire::encode(m, inner);
        wire::encode_relay(channel, inner.data(), inner.size(), f);
        send_bytes(f);
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

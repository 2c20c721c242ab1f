// The live collector names a GPU straggler while the job runs: from the in-collective GPU times its ranks' digests
// carry (each the newest kMaxDigestSpans), kept across digests; once, and without asking any rank for a dump.
#include <catch2/catch.hpp>

#include "live_test_client.h"

namespace {

// Rank `rank`'s digest at collective #upto, with the GPU times of #from .. #upto: rank 3 arrives 20 ms late at each
// (the others wait for it inside the collective). Each rank's clock is its own.
wire::Digest gpu_digest(int rank, int world, uint64_t from, uint64_t upto) {
    wire::Digest d = digest(rank, world, upto, upto, mono());
    CommInfo& c = d.comms[0];
    c.gpu_source = uint32_t(disk::GpuSource::Profiler);
    c.progress_exact = 1;
    for (uint64_t s = from; s <= upto; ++s) {
        const uint64_t end = 5'000'000'000ull * uint64_t(rank + 1) + s * 30'000'000;
        const uint64_t dur = rank == 3 ? 1'000'000 + s % 3 * 100'000 : 21'000'000 + (s + uint64_t(rank)) % 4 * 100'000;
        c.gpu_spans.push_back({s, dur, end});
    }
    return d;
}

}  // namespace

TEST_CASE("live server names a GPU straggler from the digests' GPU times, once, and asks for no dump") {
    TempDir dir("ncw_live");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));
    const uint16_t port = srv.stats().port;
    constexpr int kRanks = 4;
    std::vector<std::unique_ptr<Client>> ranks;
    for (int r = 0; r < kRanks; ++r) {
        ranks.push_back(std::make_unique<Client>(port));
        ranks.back()->send_msg(hello(r, kRanks));
        REQUIRE(expect_ack(*ranks.back()));
    }
    auto send_all = [&](uint64_t from, uint64_t upto) {
        const uint64_t before = srv.stats().analyses;
        for (int r = 0; r < kRanks; ++r) ranks[size_t(r)]->send_msg(gpu_digest(r, kRanks, from, upto));
        // An analysis that saw every rank's digest.
        REQUIRE(wait_until([&] { return srv.stats().analyses >= before + 2; }));
    };

    // 12 collectives: too few to judge.
    send_all(1, 12);
    CHECK(srv.stats().reports == 0);

    // 28 more: a digest carries 28 (at most 32), the collector keeps them with the first 12: 40 to judge.
    send_all(13, 40);
    REQUIRE(wait_until([&] { return srv.stats().reports == 1; }));
    const fs::path json_path = dir.path / "job-live" / "live-report.json";
    REQUIRE(fs::exists(json_path));
    std::ifstream in(json_path);
    const auto j = nlohmann::json::parse(in);
    REQUIRE(j["verdicts"].size() == 1);
    CHECK(j["verdicts"][0]["kind"] == "STRAGGLER");
    CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({3}));
    const std::string summary = j["verdicts"][0]["summary"];
    CHECK(summary.find("spent the least time inside 24 of 24 collectives") != std::string::npos);
    CHECK(log.has("STRAGGLER"));

    // Later windows name the same rank: no second report, and no rank was asked for a dump.
    send_all(41, 60);
    send_all(61, 80);
    CHECK(srv.stats().reports == 1);
    for (auto& c : ranks) {
        wire::FrameHeader h;
        std::vector<uint8_t> p;
        CHECK_FALSE(c->next(h, p, 0.2));
    }
    CHECK(srv.stats().bad_frames == 0);
}

// The live collector judges from what the digests prove, as `analyze` does from the files: the digests carry each
// communicator's gpu_source, progress_exact, unreached and uncompleted (format 1.4), and the same engine reads them.
#include <catch2/catch.hpp>

#include "live_test_client.h"

namespace {

// Two ranks of job `job` in AllReduce #5 (completed #4, reached #5 on record), their counts from CUDA events; `tweak`
// adds proofs. Returns the live report once written.
nlohmann::json live_report(live::LiveServer& srv, const fs::path& dir, const std::string& job,
                           const std::function<void(int, CommInfo&)>& tweak) {
    std::vector<std::unique_ptr<Client>> ranks;
    const uint64_t t = mono();
    for (int r = 0; r < 2; ++r) {
        ranks.push_back(std::make_unique<Client>(srv.stats().port));
        auto h = hello(r, 2);
        h.header.job_id = job;
        ranks.back()->send_msg(h);
        REQUIRE(expect_ack(*ranks.back()));
        auto d = digest(r, 2, 5, 4, t);
        d.comms[0].gpu_source = uint32_t(disk::GpuSource::Events);
        tweak(r, d.comms[0]);
        ranks.back()->send_msg(d);
    }
    const fs::path path = dir / job / "live-report.json";
    REQUIRE(wait_until([&] { return fs::exists(path); }));
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("live server: the digests' proven positions decide the verdict, as offline") {
    TempDir dir("ncw_live_proven");
    Log log;
    live::LiveServer srv(options(log, dir.path.string()));
    std::string err;
    REQUIRE(srv.start(&err));

    SECTION("lower bounds, nothing proven: not known, never STUCK_IN_NCCL") {
        const auto j = live_report(srv, dir.path, "bounds", [](int, CommInfo&) {});
        REQUIRE(!j["verdicts"].empty());
        CHECK(j["verdicts"][0]["kind"] == "UNKNOWN");
        CHECK(j["verdicts"][0]["summary"].get<std::string>().find("whether they completed it is not known") !=
              std::string::npos);
        CHECK(j["verdicts"][0]["headline"].get<std::string>().find("no rank is proven to hold it up") !=
              std::string::npos);
        CHECK(!any_kind(j, "STUCK_IN_NCCL"));
        const auto& row = j["comms"][0]["ranks"][0];
        CHECK(row["gpu_source"] == "cuda-events");
        CHECK(row["progress_exact"] == false);
        CHECK(row["uncompleted"] == 0);
    }
    SECTION("a pending event after #5 on both ranks: proven inside, STUCK_IN_NCCL") {
        const auto j = live_report(srv, dir.path, "inside", [](int, CommInfo& c) { c.coll_uncompleted = 5; });
        REQUIRE(!j["verdicts"].empty());
        CHECK(j["verdicts"][0]["kind"] == "STUCK_IN_NCCL");
        CHECK(j["comms"][0]["ranks"][1]["uncompleted"] == 5);
    }
    SECTION("rank 1 proven short of #5: GPU_NOT_REACHED") {
        const auto j = live_report(srv, dir.path, "short", [](int r, CommInfo& c) {
            if (r != 1) return;
            c.coll_reached = 4;
            c.coll_unreached = 5;
        });
        REQUIRE(!j["verdicts"].empty());
        CHECK(j["verdicts"][0]["kind"] == "GPU_NOT_REACHED");
        CHECK(j["verdicts"][0]["culprits"] == nlohmann::json::array({1}));
    }
    SECTION("exact counts (NCCL's profiler): STUCK_IN_NCCL") {
        const auto j = live_report(srv, dir.path, "exact", [](int, CommInfo& c) {
            c.gpu_source = uint32_t(disk::GpuSource::Profiler);
            c.progress_exact = 1;
        });
        REQUIRE(!j["verdicts"].empty());
        CHECK(j["verdicts"][0]["kind"] == "STUCK_IN_NCCL");
        CHECK(j["comms"][0]["ranks"][0]["gpu_source"] == "nccl-profiler");
        CHECK(j["comms"][0]["ranks"][0]["progress_exact"] == true);
    }
}

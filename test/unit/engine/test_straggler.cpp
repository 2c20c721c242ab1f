// Stragglers from the arrival-time skew over the signature window, on hand-built communicator views.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/straggler.h"
#include "ncclwatch/format.h"

using namespace ncw::verdict;

namespace {

constexpr uint64_t kMs = 1'000'000ull;
constexpr uint64_t kBase = 1'000'000 * kMs;

// A rank that issued AllReduce #1..#n, one every `step_ms`, `late_ms` after the step begins (plus a small jitter
// that differs per rank so that the order among the punctual ranks varies).
RankCommState rank_with(int r, int n, double step_ms, double late_ms) {
    RankCommState s;
    s.comm_rank = r;
    s.global_rank = r;
    s.host = "node" + std::to_string(r / 2);
    s.pid = 100 + r;
    s.issued = s.completed = s.reached = uint64_t(n);
    s.clock_uncertainty_s = 0;
    for (int q = 1; q <= n; ++q) {
        OpSig o;
        o.seq = uint64_t(q);
        o.op = uint8_t(ncw::disk::OpType::AllReduce);
        o.dtype = 7;
        o.count = 1024;
        const double jitter_ms = double((q * 7 + r * 13) % 5) * 0.2;  // 0 .. 0.8 ms
        o.t_issue_ns = kBase + uint64_t((double(q) * step_ms + late_ms + jitter_ms) * double(kMs));
        s.recent.push_back(o);
    }
    return s;
}

CommView view_of(std::vector<RankCommState> ranks) {
    CommView v;
    v.comm_id = 0x77;
    v.nranks = int(ranks.size());
    v.ranks = std::move(ranks);
    v.clock_note = "one boot's monotonic clock (exact)";
    return v;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("straggler: a rank last at every collective by 20 ms is named", "[straggler]") {
    auto v = view_of(
        {rank_with(0, 64, 100, 0), rank_with(1, 64, 100, 0), rank_with(2, 64, 100, 20), rank_with(3, 64, 100, 0)});
    auto out = find_stragglers(v);
    REQUIRE(out.size() == 1);
    CHECK(out[0].kind == Kind::Straggler);
    CHECK(out[0].culprits == std::vector<int>{2});
    CHECK(out[0].seq == 64);
    CHECK(contains(out[0].summary, "rank 2 (global 2, host node1) arrived last at 64 of 64 collectives (#1 .. #64)"));
    CHECK(contains(out[0].summary, "a straggler, not a hang"));
    CHECK(std::any_of(out[0].evidence.begin(), out[0].evidence.end(),
                      [](const std::string& e) { return contains(e, "median gap between consecutive collectives"); }));
}

TEST_CASE("straggler: what is not a straggler", "[straggler]") {
    SECTION("late by less than 10% of the step gap") {
        auto v = view_of({rank_with(0, 64, 100, 0), rank_with(1, 64, 100, 6)});
        CHECK(find_stragglers(v).empty());
    }
    SECTION("fewer than 16 common sequence numbers") {
        auto v = view_of({rank_with(0, 12, 100, 0), rank_with(1, 12, 100, 50)});
        CHECK(find_stragglers(v).empty());
    }
    SECTION("last only half of the time") {
        auto r1 = rank_with(1, 64, 100, 30);
        for (auto& o : r1.recent.mut())
            if (o.seq % 2) o.t_issue_ns -= 60 * kMs;
        CHECK(find_stragglers(view_of({rank_with(0, 64, 100, 0), r1})).empty());
    }
    SECTION("lateness within the stated clock uncertainty") {
        auto r0 = rank_with(0, 64, 100, 0), r1 = rank_with(1, 64, 100, 20);
        r0.clock_uncertainty_s = r1.clock_uncertainty_s = 0.015;  // 30 ms between the two
        CHECK(find_stragglers(view_of({r0, r1})).empty());
    }
}

TEST_CASE("straggler: clock offsets", "[straggler]") {
    SECTION("an offset that puts a host's clock right removes an apparent straggler") {
        auto r1 = rank_with(1, 64, 100, 20);
        r1.clock_offset_ns = -20 * int64_t(kMs);
        CHECK(find_stragglers(view_of({rank_with(0, 64, 100, 0), r1, rank_with(2, 64, 100, 0)})).empty());
    }
    SECTION("unknown uncertainty is stated") {
        auto r0 = rank_with(0, 64, 100, 0), r1 = rank_with(1, 64, 100, 20), r2 = rank_with(2, 64, 100, 0);
        r0.clock_uncertainty_s = r1.clock_uncertainty_s = r2.clock_uncertainty_s = -1;
        auto v = view_of({r0, r1, r2});
        v.clock_note = "clock offsets from wall clocks, uncertainty unknown (NTP)";
        auto out = find_stragglers(v);
        REQUIRE(out.size() == 1);
        CHECK(std::any_of(out[0].evidence.begin(), out[0].evidence.end(), [](const std::string& e) {
            return contains(e, "clocks: clock offsets from wall clocks, uncertainty unknown (NTP)");
        }));
    }
}

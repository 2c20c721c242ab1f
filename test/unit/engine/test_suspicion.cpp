// Early suspicion (engine/suspicion.h): the threshold from the ranks' baselines, and the stall's own verdicts at it.
#include "engine/suspicion.h"
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

constexpr uint64_t kMs = 1'000'000ull;

// Rank 2 skipped #10 and is idle outside NCCL; ranks 0, 1, 3 wait in #10 for `wait_s`, as the shim leaves them before
// any stall report (no stall_since_ns); every rank's baseline is `p99_ns`.
CommView skipped(double wait_s, uint64_t p99_ns) {
    std::vector<RankCommState> ranks;
    for (int r = 0; r < 4; ++r) {
        RankCommState s = r == 2 ? idle(r, 9, wait_s + 0.2) : waiting(r, 9, wait_s);
        s.stall_since_ns = 0;
        s.t_last_progress_ns = ago(wait_s);
        s.completion_gap_p99_ns = p99_ns;
        ranks.push_back(s);
    }
    return view(4, ranks);
}

}  // namespace

TEST_CASE("the threshold: max(20 x the p99 gap, 5 s); none without a baseline; the communicator's is the widest") {
    CHECK(suspect_after_s(0) == 0);
    CHECK(suspect_after_s(1 * kMs) == kSuspectFloorS);
    CHECK(suspect_after_s(500 * kMs) == Approx(10.0));
    CommView v = skipped(6, 10 * kMs);
    CHECK(comm_suspect_after_s(v) == kSuspectFloorS);
    v.ranks[3].completion_gap_p99_ns = 400 * kMs;
    CHECK(comm_suspect_after_s(v) == Approx(8.0));
    for (auto& r : v.ranks) r.completion_gap_p99_ns = 0;
    CHECK(comm_suspect_after_s(v) == 0);
}

TEST_CASE("a wait past the threshold is suspected with the verdict the stall would have, labelled") {
    const auto sus = diagnose_suspicion(skipped(6, 10 * kMs), kNow, 60);
    REQUIRE(!sus.empty());
    const Verdict& v = sus.front();
    CHECK(v.suspected);
    CHECK(v.kind == Kind::NotJoined);
    CHECK(v.culprits == std::vector<int>{2});
    CHECK(v.seq == 10);
    CHECK(v.waiting == std::vector<int>{0, 1, 3});
    REQUIRE(!v.evidence.empty());
    CHECK(contains(v.evidence.front(), "suspected, not yet a stall"));
    CHECK(contains(v.evidence.front(), "p99 10.0 ms"));
    CHECK(contains(v.evidence.front(), "timeout (60.0 s)"));

    // The stall, once the same wait passes the timeout: the same verdict, not labelled.
    const auto stall = diagnose_stall(skipped(61, 10 * kMs), kNow, 60);
    REQUIRE(!stall.empty());
    CHECK(!stall.front().suspected);
    CHECK(stall.front().kind == v.kind);
    CHECK(stall.front().culprits == v.culprits);
    CHECK(stall.front().seq == v.seq);
}

TEST_CASE("nothing is suspected below the threshold, without a baseline, or when the threshold is the timeout's") {
    CHECK(diagnose_suspicion(skipped(4, 10 * kMs), kNow, 60).empty());   // 4 s < the 5 s floor
    CHECK(diagnose_suspicion(skipped(6, 0), kNow, 60).empty());          // no baseline (fewer than 20 gaps)
    CHECK(diagnose_suspicion(skipped(7, 400 * kMs), kNow, 60).empty());  // 7 s < 20 x 400 ms = 8 s
    CHECK(!diagnose_suspicion(skipped(9, 400 * kMs), kNow, 60).empty());
    CHECK(diagnose_suspicion(skipped(50, 3000 * kMs), kNow, 30).empty());  // 60 s threshold >= the 30 s timeout
}

TEST_CASE("an idle communicator is never suspected, however long the pause") {
    std::vector<RankCommState> ranks;
    for (int r = 0; r < 4; ++r) {
        RankCommState s = idle(r, 9, 30);
        s.completion_gap_p99_ns = 1 * kMs;
        ranks.push_back(s);
    }
    CHECK(diagnose_suspicion(view(4, ranks), kNow, 60).empty());
}

TEST_CASE("an init waiting for a rank never seen is suspected at kInitSuspectS, on one host only") {
    // Ranks 0-2 entered the init `for_s` ago and wait in it; rank 3 never appeared. The whole job on one host.
    auto init_view = [](double for_s, int local_world_size) {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 3; ++r) {
            RankCommState s;
            s.comm_rank = s.global_rank = r;
            s.pid = 100 + r;
            s.host = "node-a";
            s.comm_state = uint32_t(ncw::disk::CommState::Initializing);
            s.t_init_start_ns = ago(for_s);
            s.world_size = 4;
            s.local_world_size = local_world_size;
            ranks.push_back(s);
        }
        return view(4, ranks);
    };
    CHECK(diagnose_init_suspicion(init_view(kInitSuspectS - 1, 4), kNow, 60).empty());
    const auto sus = diagnose_init_suspicion(init_view(kInitSuspectS + 1, 4), kNow, 60);
    REQUIRE(sus.size() == 1);
    CHECK(sus[0].kind == Kind::InitHang);
    CHECK(sus[0].suspected);
    CHECK(sus[0].culprits == std::vector<int>{3});
    CHECK(contains(sus[0].evidence.front(), "suspected, not yet an init hang"));
    // Two nodes (4 ranks, 2 a host): rank 3 may simply be on the other one, out of this view.
    CHECK(diagnose_init_suspicion(init_view(kInitSuspectS + 1, 2), kNow, 60).empty());
    // Not below the timeout: the timeout's INIT_HANG says it.
    CHECK(diagnose_init_suspicion(init_view(kInitSuspectS + 1, 4), kNow, kInitSuspectS).empty());
    // Still arriving (the GPU grid under load: ranks came over 5 s, the last 3 s ago, and rank 3 was 8.5 s late): no
    // suspicion until arrivals have stopped for kInitSuspectS, and for as long as they took.
    auto spread = init_view(kInitSuspectS + 1, 4);
    spread.ranks[1].t_init_start_ns = ago(6);
    spread.ranks[2].t_init_start_ns = ago(3);
    CHECK(diagnose_init_suspicion(spread, kNow, 60).empty());
    spread.ranks[0].t_init_start_ns = ago(22);
    spread.ranks[1].t_init_start_ns = ago(18);
    spread.ranks[2].t_init_start_ns = ago(kInitSuspectS + 1);  // arrived over 13 s: wait 13 s after the last
    CHECK(diagnose_init_suspicion(spread, kNow, 60).empty());
    spread.ranks[2].t_init_start_ns = ago(14);
    CHECK(diagnose_init_suspicion(spread, kNow, 60).size() == 1);
}

// The job-level pass over stalled communicators: which stalled first, which wait because of it.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/cascade.h"
#include "ncclwatch/format.h"

using namespace ncw::verdict;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint64_t kNow = 10'000 * kSec;
uint64_t ago(double s) { return kNow - uint64_t(s * double(kSec)); }

// Global rank g of a Megatron 2x4 grid: TP groups {0-3} and {4-7} (comm rank g % 4), DP groups {g, g+4} (comm
// rank g / 4). Processes: host node<g/4>, pid 100+g.
RankCommState member(int global, int comm_rank, uint64_t done, double wait_s) {
    RankCommState s;
    s.comm_rank = comm_rank;
    s.global_rank = global;
    s.host = "node" + std::to_string(global / 4);
    s.pid = 100 + global;
    s.gpu_tracking = true;
    s.issued = s.reached = s.completed = done;
    s.t_last_issue_ns = s.t_last_progress_ns = ago(wait_s + 100);
    for (uint64_t q = done > 3 ? done - 3 : 1; q <= done; ++q) {
        OpSig o;
        o.seq = q;
        o.op = uint8_t(ncw::disk::OpType::AllReduce);
        o.dtype = 7;
        o.count = 1024;
        o.t_issue_ns = ago(wait_s + 100 + double(done - q));
        s.recent.push_back(o);
    }
    if (wait_s > 0) {
        s.issued = s.reached = done + 1;
        OpSig o = s.recent.back();
        o.seq = done + 1;
        o.t_issue_ns = ago(wait_s);
        s.recent.push_back(o);
        s.t_last_issue_ns = s.stall_since_ns = ago(wait_s);
    }
    return s;
}

CommView comm(uint64_t id, std::vector<RankCommState> ranks) {
    CommView v;
    v.comm_id = id;
    v.nranks = int(ranks.size());
    v.ranks = std::move(ranks);
    return v;
}

}  // namespace

TEST_CASE("cascade: a TP stall holds a DP group, which holds the other TP group", "[cascade]") {
    // Global rank 5 skipped a TP all_reduce in TP group 1 (globals 4-7): 4, 6, 7 wait there since 60 s. Global 0
    // waits in its DP all_reduce with global 4 (held in TP 1) since 50 s. Globals 1-3 wait in TP 0 for global 0
    // (held in DP 0) since 40 s.
    auto tp1 = comm(0xB1, {member(4, 0, 10, 60), member(5, 1, 10, 0), member(6, 2, 10, 60), member(7, 3, 10, 60)});
    auto dp0 = comm(0xD0, {member(0, 0, 20, 50), member(4, 1, 19, 0)});
    auto tp0 = comm(0xA0, {member(0, 0, 10, 0), member(1, 1, 10, 40), member(2, 2, 10, 40), member(3, 3, 10, 40)});
    auto dp1 = comm(0xD1, {member(1, 0, 20, 0), member(5, 1, 20, 0)});  // healthy
    std::vector<Verdict> v_tp1 = diagnose_stall(tp1, kNow, 10), v_dp0 = diagnose_stall(dp0, kNow, 10),
                         v_tp0 = diagnose_stall(tp0, kNow, 10), v_dp1 = diagnose_stall(dp1, kNow, 10);
    REQUIRE(v_tp1.size() == 1);
    REQUIRE(v_dp0.size() == 1);
    REQUIRE(v_tp0.size() == 1);
    CHECK(v_dp1.empty());
    CHECK(v_tp1[0].culprits == std::vector<int>{1});

    // Order of the input does not matter.
    assign_cascade_roles({{&tp0, &v_tp0}, {&dp1, &v_dp1}, {&dp0, &v_dp0}, {&tp1, &v_tp1}});
    CHECK(v_tp1[0].role == Role::Initiating);
    CHECK(v_tp1[0].caused_by_comm == 0);
    CHECK(v_dp0[0].role == Role::Cascade);
    CHECK(v_dp0[0].caused_by_comm == 0xB1);
    CHECK(v_tp0[0].role == Role::Cascade);
    CHECK(v_tp0[0].caused_by_comm == 0xB1);  // the root of the chain, through DP 0
    CHECK(v_dp0[0].evidence.front().find("cascade: rank 0 (global 4, host node1, pid 104) is held in comm "
                                         "0x00000000000000b1 (waiting in #11 there") == 0);
    CHECK(v_tp0[0].evidence.front().find("the chain starts in comm 0x00000000000000b1") != std::string::npos);
    CHECK(v_tp1[0].evidence.front().find("initiating: stalled first (60.0 s ago)") == 0);
}

TEST_CASE("cascade: a stall held by two chains is a cascade of the one that began first", "[cascade]") {
    // The GPU grid's shape: global 5 is absent, so TP 1 (4, 6, 7 wait since 60 s) and DP 1 (global 1 waits for it
    // since 59.9 s: it issued there right after its TP op) both stall on it. TP 0 waits for globals 0 and 1: 0 is
    // held in DP 0 (by global 4, held in TP 1), 1 in DP 1. TP 0 is a cascade of TP 1, the first domino and the job's
    // lead, not of DP 1, though DP 1's chain is the shorter.
    auto tp1 = comm(0xB1, {member(4, 0, 10, 60), member(5, 1, 10, 0), member(6, 2, 10, 60), member(7, 3, 10, 60)});
    auto dp0 = comm(0xD0, {member(0, 0, 20, 50), member(4, 1, 19, 0)});
    auto dp1 = comm(0xD1, {member(1, 0, 20, 59.9), member(5, 1, 20, 0)});
    auto tp0 = comm(0xA0, {member(0, 0, 10, 0), member(1, 1, 10, 0), member(2, 2, 10, 40), member(3, 3, 10, 40)});
    std::vector<Verdict> v_tp1 = diagnose_stall(tp1, kNow, 10), v_dp0 = diagnose_stall(dp0, kNow, 10),
                         v_dp1 = diagnose_stall(dp1, kNow, 10), v_tp0 = diagnose_stall(tp0, kNow, 10);
    REQUIRE(v_tp1.size() == 1);
    REQUIRE(v_dp0.size() == 1);
    REQUIRE(v_dp1.size() == 1);
    REQUIRE(v_tp0.size() == 1);
    assign_cascade_roles({{&tp0, &v_tp0}, {&dp1, &v_dp1}, {&dp0, &v_dp0}, {&tp1, &v_tp1}});
    CHECK(v_tp1[0].role == Role::Initiating);
    CHECK(v_dp0[0].caused_by_comm == 0xB1);
    CHECK(v_tp0[0].role == Role::Cascade);
    CHECK(v_tp0[0].caused_by_comm == 0xB1);
    CHECK(v_tp0[0].evidence.front().find("held in comm 0x00000000000000d0") != std::string::npos);
}

TEST_CASE("cascade: unrelated stalls and single stalls keep no role", "[cascade]") {
    SECTION("one stall") {
        auto tp1 = comm(0xB1, {member(4, 0, 10, 60), member(5, 1, 10, 0)});
        auto vs = diagnose_stall(tp1, kNow, 10);
        REQUIRE(vs.size() == 1);
        assign_cascade_roles({{&tp1, &vs}});
        CHECK(vs[0].role == Role::None);
    }
    SECTION("two stalls with no process in common") {
        auto a = comm(0xA, {member(0, 0, 10, 60), member(1, 1, 10, 0)});
        auto b = comm(0xB, {member(2, 0, 10, 30), member(3, 1, 10, 0)});
        auto va = diagnose_stall(a, kNow, 10), vb = diagnose_stall(b, kNow, 10);
        assign_cascade_roles({{&a, &va}, {&b, &vb}});
        CHECK(va[0].role == Role::None);
        CHECK(vb[0].role == Role::None);
    }
    SECTION("a culprit held in a later stall is not its cause") {
        // Global 0 is waiting in A since 20 s; B stalled 40 s ago naming global 0: A is not B's cause.
        auto a = comm(0xA, {member(0, 0, 10, 20), member(1, 1, 10, 0)});
        auto b = comm(0xB, {member(0, 0, 10, 0), member(2, 1, 10, 40)});
        auto va = diagnose_stall(a, kNow, 10), vb = diagnose_stall(b, kNow, 10);
        assign_cascade_roles({{&a, &va}, {&b, &vb}});
        CHECK(vb[0].role == Role::None);
    }
}

TEST_CASE("cascade: the peers NCCL reported an error on do not make a dead rank's stall a cascade", "[cascade]") {
    // Global 5 died in TP 1 (globals 4-7): its DEAD verdict; globals 4, 6, 7 wait, and NCCL reported an error on
    // global 4 (its peer gone). Global 4 is also held in DP 0 (with global 0), which stalled 30 s before: yet TP 1
    // waits on the dead rank, not on global 4, and is no cascade of DP 0.
    auto tp1 = comm(0xB1, {member(4, 0, 10, 20), member(5, 1, 10, 0), member(6, 2, 10, 20), member(7, 3, 10, 20)});
    auto dp0 = comm(0xD0, {member(0, 0, 10, 50), member(4, 1, 10, 50)});
    Verdict dead;
    dead.kind = Kind::Dead;
    dead.comm_id = 0xB1;
    dead.seq = 11;
    dead.culprits = {1};
    dead.waiting = {0, 2, 3};
    dead.stalled_for_s = 20;
    Verdict err = dead;
    err.kind = Kind::AsyncError;
    err.culprits = {0};
    std::vector<Verdict> v_tp1{dead, err};
    std::vector<Verdict> v_dp0 = diagnose_stall(dp0, kNow, 10);
    REQUIRE(!v_dp0.empty());
    assign_cascade_roles({{&tp1, &v_tp1}, {&dp0, &v_dp0}});
    CHECK(v_tp1[0].role != Role::Cascade);
    CHECK(v_tp1[1].role != Role::Cascade);
}

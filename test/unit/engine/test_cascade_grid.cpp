// The 2 x 4 grid on real NCCL (examples/grid_2x4.py: 8 ranks on one GPU, rank 5 in slow_eval() before its step-10
// collectives), as the ranks' files show it with lower-bound counts (CUDA events, sampled) that lag the GPUs: the
// initiating NOT_JOINED on rank 5's tensor-parallel group, the data-parallel groups that wait on it marked cascades,
// and no STUCK_IN_NCCL, no GPU_NOT_REACHED and no word about the transport anywhere.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/cascade.h"
#include "ncclwatch/format.h"

using namespace ncw::verdict;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint64_t kNow = 10'000 * kSec;
constexpr double kTimeout = 10.0;
uint64_t ago(double s) { return kNow - uint64_t(s * double(kSec)); }

// Step k (0-based) issues op #k+1 on the rank's TP group, then on its DP group 1 ms later. Steps 0-10 ran 50 ms
// apart up to 60 s ago (step 10: #11); the CPUs of every rank but 5 ran on through step 19, 30 ms a step, while
// their GPUs stopped at #11.
double tp_ago(uint64_t seq) { return seq <= 11 ? 60.0 + 0.05 * double(11 - seq) : 60.0 - 0.03 * double(seq - 11); }
double issue_ago(bool tp, uint64_t seq) { return tp ? tp_ago(seq) : tp_ago(seq) - 0.001; }

// One rank of one group: issued #1..#issued (all_reduce), counts from sampled CUDA events: lower bounds, no proof.
RankCommState grid_rank(int global, int comm_rank, bool tp, uint64_t issued, uint64_t reached, uint64_t completed) {
    RankCommState s;
    s.comm_rank = comm_rank;
    s.global_rank = global;
    s.host = "gpu-host";
    s.pid = 100 + global;
    s.gpu_tracking = true;
    s.gpu_source = uint32_t(ncw::disk::GpuSource::Events);
    s.issued = s.returned = issued;
    s.reached = reached;
    s.completed = completed;
    for (uint64_t q = 1; q <= issued; ++q) {
        OpSig o;
        o.seq = q;
        o.op = uint8_t(ncw::disk::OpType::AllReduce);
        o.dtype = 7;
        o.count = 16384;
        o.t_issue_ns = ago(issue_ago(tp, q));
        if (q > completed + 1) o.flags = ncw::disk::kFlagSampledOut;  // followed the sample in flight
        s.recent.push_back(o);
    }
    s.t_last_issue_ns = s.recent.back().t_issue_ns;
    s.t_last_progress_ns = ago(issue_ago(tp, completed) - 0.02);  // when the last completion on record came in
    return s;
}

CommView comm(uint64_t id, std::vector<RankCommState> ranks) {
    CommView v;
    v.comm_id = id;
    v.nranks = int(ranks.size());
    v.ranks = std::move(ranks);
    return v;
}

bool says_transport(const Verdict& v) {
    auto has = [](const std::string& s) {
        return s.find("transport") != std::string::npos || s.find("network path") != std::string::npos;
    };
    if (has(v.summary)) return true;
    for (const auto& e : v.evidence)
        if (has(e)) return true;
    return false;
}

}  // namespace

TEST_CASE("cascade on the real NCCL grid: lagging lower-bound counts", "[cascade][grid]") {
    // TP[4-7]: ranks 4, 6, 7 issued #20 and their GPUs wait in #11; rank 5 completed #10 and never issued #11. Their
    // completions lag (#8, reached #9).
    auto tp1 = comm(0xB1, {grid_rank(4, 0, true, 20, 9, 8), grid_rank(5, 1, true, 10, 10, 10),
                           grid_rank(6, 2, true, 20, 9, 8), grid_rank(7, 3, true, 20, 9, 8)});
    // TP[0-3]: every rank completed #11 (rank 0's record shows it; ranks 1-3 lag at the first sample, #2); #12 waits
    // on their streams behind their DP #11.
    auto tp0 = comm(0xA0, {grid_rank(0, 0, true, 20, 11, 11), grid_rank(1, 1, true, 20, 3, 2),
                           grid_rank(2, 2, true, 20, 3, 2), grid_rank(3, 3, true, 20, 3, 2)});
    // DP[i, i+4], i = 0, 2, 3: rank i's GPU waits in #11 (reached on record), rank i+4's never gets there (its stream
    // waits behind TP #11); nothing proves either. The partner's counts lag (#7).
    auto dp = [](uint64_t id, int g) {
        return comm(id, {grid_rank(g, 0, false, 20, 11, 10), grid_rank(g + 4, 1, false, 20, 7, 7)});
    };
    auto dp0 = dp(0xD0, 0), dp2 = dp(0xD2, 2), dp3 = dp(0xD3, 3);
    // DP[1,5]: rank 1 waits in #11 (its completions lag at #9), which rank 5 never issued either.
    auto dp1 = comm(0xD1, {grid_rank(1, 0, false, 20, 10, 9), grid_rank(5, 1, false, 10, 10, 10)});

    std::vector<CommView*> views{&tp0, &tp1, &dp0, &dp1, &dp2, &dp3};
    std::vector<std::vector<Verdict>> vs;
    for (auto* v : views) vs.push_back(diagnose_stall(*v, kNow, kTimeout));
    auto& v_tp0 = vs[0];
    auto& v_tp1 = vs[1];
    auto& v_dp1 = vs[3];
    for (const auto& list : vs) {
        REQUIRE(!list.empty());
        for (const auto& v : list) {
            CHECK(v.kind != Kind::StuckInNccl);
            CHECK(v.kind != Kind::GpuNotReached);
            CHECK(!says_transport(v));
        }
    }
    std::vector<CommVerdicts> cv;
    for (size_t i = 0; i < views.size(); ++i) cv.push_back({views[i], &vs[i]});
    assign_cascade_roles(cv);

    // The initiating stall: rank 5 never issued TP #11.
    REQUIRE(v_tp1.size() == 1);
    CHECK(v_tp1[0].kind == Kind::NotJoined);
    CHECK(v_tp1[0].seq == 11);
    CHECK(v_tp1[0].culprits == std::vector<int>{1});
    CHECK(v_tp1[0].waiting == std::vector<int>{0, 2, 3});
    CHECK(v_tp1[0].role == Role::Initiating);
    // The DP groups whose partner (4, 6, 7) is held in it: cascades of TP[4-7], saying what is not known.
    for (size_t i : {size_t(2), size_t(4), size_t(5)}) {
        INFO("DP comm " << std::hex << views[i]->comm_id);
        REQUIRE(vs[i].size() == 1);
        const Verdict& v = vs[i][0];
        CHECK(v.kind == Kind::Unknown);
        CHECK(v.seq == 11);
        CHECK(v.summary.find("whether the GPU of rank 1 reached #11 is not known: its counts are lower bounds "
                             "(CUDA events, sampled)") != std::string::npos);
        CHECK(v.role == Role::Cascade);
        CHECK(v.caused_by_comm == 0xB1);
        CHECK(v.evidence.front().find("cascade: rank ") == 0);
        CHECK(v.evidence.front().find("is held in comm 0x00000000000000b1 (waiting in #11 there), and it issued its "
                                      "ops here #11..#20 after it entered that one") != std::string::npos);
    }
    // DP[1,5]: rank 5 never issued it either (its own NOT_JOINED, not a cascade: rank 5 is held in no stall).
    REQUIRE(v_dp1.size() == 1);
    CHECK(v_dp1[0].kind == Kind::NotJoined);
    CHECK(v_dp1[0].culprits == std::vector<int>{1});
    CHECK(v_dp1[0].role != Role::Cascade);
    // TP[0-3] waits behind the DP ops its ranks are held in.
    REQUIRE(v_tp0.size() == 1);
    CHECK(v_tp0[0].kind == Kind::Unknown);
    CHECK(v_tp0[0].seq == 12);
    CHECK(v_tp0[0].role == Role::Cascade);
    CHECK((v_tp0[0].caused_by_comm == 0xB1 || v_tp0[0].caused_by_comm == 0xD1));
}

TEST_CASE("cascade on the real NCCL grid: a rank proven short of the DP op is GPU_NOT_REACHED, a cascade",
          "[cascade][grid]") {
    // The same DP[0,4] once rank 4's pending event before DP #11 proves #11 not reached.
    auto tp1 = comm(0xB1, {grid_rank(4, 0, true, 20, 11, 10), grid_rank(5, 1, true, 10, 10, 10),
                           grid_rank(6, 2, true, 20, 11, 10), grid_rank(7, 3, true, 20, 11, 10)});
    auto dp0 = comm(0xD0, {grid_rank(0, 0, false, 20, 11, 10), grid_rank(4, 1, false, 20, 10, 10)});
    dp0.ranks[1].unreached = 11;
    auto v_tp1 = diagnose_stall(tp1, kNow, kTimeout), v_dp0 = diagnose_stall(dp0, kNow, kTimeout);
    REQUIRE(v_dp0.size() == 1);
    CHECK(v_dp0[0].kind == Kind::GpuNotReached);
    CHECK(v_dp0[0].culprits == std::vector<int>{1});
    assign_cascade_roles({{&dp0, &v_dp0}, {&tp1, &v_tp1}});
    CHECK(v_tp1[0].role == Role::Initiating);
    CHECK(v_dp0[0].role == Role::Cascade);
    CHECK(v_dp0[0].caused_by_comm == 0xB1);
}

TEST_CASE("cascade: stalls that only hold one another still form no cycle", "[cascade]") {
    // Two groups of the same two processes, each waiting in the other's op (nothing proven): one is taken for the
    // start, the other for its cascade; never both cascades.
    auto a = comm(0xA, {grid_rank(0, 0, true, 20, 11, 10), grid_rank(1, 1, true, 20, 11, 10)});
    auto b = comm(0xB, {grid_rank(0, 0, false, 20, 11, 10), grid_rank(1, 1, false, 20, 11, 10)});
    auto va = diagnose_stall(a, kNow, kTimeout), vb = diagnose_stall(b, kNow, kTimeout);
    REQUIRE(va.size() == 1);
    REQUIRE(vb.size() == 1);
    assign_cascade_roles({{&a, &va}, {&b, &vb}});
    CHECK(!(va[0].role == Role::Cascade && vb[0].role == Role::Cascade));
    CHECK((va[0].role == Role::Cascade || vb[0].role == Role::Cascade));
}

TEST_CASE("cascade: stalls that began at the same moment: the culprit's own issue order decides", "[cascade]") {
    // The test NCCL (calls block, no GPU tracking): global 4 went into TP #10 (5.000 s ago) after its DP #9
    // (5.5 s ago) and blocks there; global 0 began waiting in DP #10 2 ms earlier than TP's first waiter.
    auto blocking = [](int global, int comm_rank, uint64_t issued, double last_issue_ago, double wait_ago) {
        RankCommState s;
        s.comm_rank = comm_rank;
        s.global_rank = global;
        s.host = "node0";
        s.pid = 100 + global;
        s.issued = s.returned = issued;
        s.completed = s.reached = wait_ago > 0 ? issued - 1 : issued;
        for (uint64_t q = issued > 3 ? issued - 3 : 1; q <= issued; ++q) {
            OpSig o;
            o.seq = q;
            o.op = uint8_t(ncw::disk::OpType::AllReduce);
            o.dtype = 7;
            o.count = 1024;
            o.t_issue_ns = ago(last_issue_ago + double(issued - q));
            s.recent.push_back(o);
        }
        s.t_last_issue_ns = ago(last_issue_ago);
        s.t_last_progress_ns = ago(wait_ago > 0 ? wait_ago + 0.5 : last_issue_ago);
        if (wait_ago > 0) s.returned = issued - 1, s.stall_since_ns = ago(wait_ago);
        return s;
    };
    auto tp = comm(0xB1, {blocking(4, 0, 10, 5.000, 5.000), blocking(5, 1, 9, 5.6, 0)});
    auto dp = comm(0xD0, {blocking(0, 0, 10, 5.002, 5.002), blocking(4, 1, 9, 5.5, 0)});
    auto v_tp = diagnose_stall(tp, kNow, 3.0), v_dp = diagnose_stall(dp, kNow, 3.0);
    REQUIRE(v_dp.size() == 1);
    REQUIRE(v_dp[0].kind == Kind::NotJoined);
    REQUIRE(v_dp[0].stalled_for_s > v_tp[0].stalled_for_s);
    assign_cascade_roles({{&tp, &v_tp}, {&dp, &v_dp}});
    CHECK(v_dp[0].role == Role::Cascade);
    CHECK(v_dp[0].caused_by_comm == 0xB1);
    CHECK(v_dp[0].evidence.front().find("which it entered after its last op here, #9") != std::string::npos);
    CHECK(v_tp[0].role == Role::Initiating);

    SECTION("not when it issued here after it went into the other op") {
        auto dp2 = comm(0xD0, {blocking(0, 0, 10, 5.002, 5.002), blocking(4, 1, 9, 4.9, 0)});
        auto v_tp2 = diagnose_stall(tp, kNow, 3.0), v_dp2 = diagnose_stall(dp2, kNow, 3.0);
        assign_cascade_roles({{&tp, &v_tp2}, {&dp2, &v_dp2}});
        CHECK(v_dp2[0].role != Role::Cascade);
    }
}

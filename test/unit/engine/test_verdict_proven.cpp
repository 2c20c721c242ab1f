// The verdict engine claims only what the counts prove (format 1.4): lower-bound counts (CUDA events) with and
// without proofs (unreached, uncompleted), exact ones (NCCL's profiler), calls that have not returned.
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

bool any_line(const Verdict& v, const std::string& s) {
    return std::any_of(v.evidence.begin(), v.evidence.end(), [&](const std::string& e) { return contains(e, s); });
}

bool blames_transport(const std::vector<Verdict>& vs) {
    for (const auto& v : vs) {
        if (v.kind == Kind::StuckInNccl) continue;  // proven: the one verdict that may
        if (contains(v.summary, "transport") || contains(v.summary, "network path")) return true;
        for (const auto& e : v.evidence)
            if (contains(e, "transport") || contains(e, "network path")) return true;
    }
    return false;
}

// Four ranks in AllReduce #42 for 12 s, counts from CUDA events: reached `reached`, completed #41, proofs as given.
std::vector<RankCommState> four_waiting(uint64_t reached, uint64_t unreached = 0, uint64_t uncompleted = 0) {
    std::vector<RankCommState> rs;
    for (int r = 0; r < 4; ++r) {
        rs.push_back(lower_bounds(waiting(r, 41, 12.0), unreached, uncompleted));
        rs.back().reached = reached;
    }
    return rs;
}

}  // namespace

TEST_CASE("proven: lower-bound counts with no proof name neither GPU_NOT_REACHED nor STUCK_IN_NCCL", "[verdict]") {
    SECTION("the reach not known") {
        auto vs = diagnose_stall(view(4, four_waiting(41)), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].seq == 42);
        CHECK(vs[0].culprits.empty());
        CHECK(vs[0].missing.empty());
        CHECK(vs[0].waiting == Ranks{0, 1, 2, 3});
        CHECK(contains(vs[0].summary, "4 of 4 ranks wait in AllReduce #42"));
        CHECK(contains(vs[0].summary,
                       "whether the GPUs of ranks 0,1,2,3 reached #42 is not known: their counts are "
                       "lower bounds (CUDA events)"));
        CHECK(contains(vs[0].summary, "no rank is proven to hold it up"));
        CHECK(any_line(vs[0],
                       "rank 0 (global 0, host node0, pid 1000): issued #42, reached #41, completed #41 "
                       "(lower bounds: CUDA events), waiting 12.0 s"));
        CHECK(any_line(vs[0], "not STUCK_IN_NCCL"));
        CHECK(!blames_transport(vs));
    }
    SECTION("reached, the completion not known: the healthy group whose completions lag") {
        auto vs = diagnose_stall(view(4, four_waiting(42)), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(contains(vs[0].summary,
                       "the GPUs of ranks 0,1,2,3 reached #42; whether they completed it is not "
                       "known: their counts are lower bounds (CUDA events)"));
        CHECK(!blames_transport(vs));
    }
    SECTION("the run-ahead: the op it is in is one of a range") {
        auto rs = four_waiting(41);
        rs[2] = lower_bounds(waiting(2, 41, 12.0, 60));
        rs[2].reached = 41;
        auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(contains(vs[0].summary, "is one of #42..#60"));
    }
    SECTION("some proven inside, one not known: the one is named, not blamed") {
        auto rs = four_waiting(42, 0, 42);
        rs[2].uncompleted = 0;
        auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].culprits.empty());
        CHECK(contains(vs[0].summary,
                       "the GPU of rank 2 reached #42; whether it completed it is not known: its "
                       "counts are lower bounds (CUDA events)"));
        CHECK(contains(vs[0].summary, "ranks 0,1,3 are proven inside it"));
    }
}

TEST_CASE("proven: an event before the op still pending proves it not reached: GPU_NOT_REACHED", "[verdict]") {
    auto rs = four_waiting(42, 0, 42);
    rs[1].reached = 41;
    rs[1].unreached = 42;
    auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::GpuNotReached);
    CHECK(vs[0].culprits == Ranks{1});
    CHECK(vs[0].waiting == Ranks{0, 2, 3});
    CHECK(contains(vs[0].summary, "rank 1's GPU has not reached #42 (busy with earlier work on its stream)"));
    CHECK(any_line(vs[0], "an event recorded on its stream before #42 has not completed"));
    // The proofs close rank 1's counts (#41 reached and completed, #42 proven neither): exact, not lower bounds.
    CHECK(any_line(vs[0], "issued #42, reached #41, completed #41 (#42 proven not reached; #42 proven not completed)"));
    CHECK(!any_line(vs[0], "lower bounds"));

    SECTION("a proof at an earlier op covers the later ones") {
        rs[1].unreached = 41;
        rs[1].reached = 40;
        rs[1].completed = 40;
        auto ws = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(!ws.empty());
        CHECK(ws[0].kind == Kind::GpuNotReached);
        CHECK(ws[0].seq == 41);
        CHECK(ws[0].culprits == Ranks{1});
    }
    SECTION("a proof the counts caught up with proves nothing") {
        rs[1].unreached = 41;  // reached #41 since: the pending event that proved it has completed
        auto ws = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(ws.size() == 1);
        CHECK(ws[0].kind == Kind::Unknown);
        CHECK(contains(ws[0].summary, "whether the GPU of rank 1 reached #42 is not known"));
    }
    SECTION("without the proof: not known, not GPU_NOT_REACHED") {
        rs[1].unreached = 0;
        auto ws = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(ws.size() == 1);
        CHECK(ws[0].kind == Kind::Unknown);
        CHECK(!find_kind(ws, Kind::GpuNotReached));
    }
}

TEST_CASE("proven: every rank proven inside the op: STUCK_IN_NCCL", "[verdict]") {
    SECTION("exact counts (NCCL's profiler)") {
        std::vector<RankCommState> rs;
        for (int r = 0; r < 4; ++r) rs.push_back(waiting(r, 41, 12.0));
        REQUIRE(rs[0].progress_exact);
        REQUIRE(rs[0].gpu_source == uint32_t(ncw::disk::GpuSource::Profiler));
        auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
        CHECK(any_line(vs[0], "every rank is proven inside the op"));
        CHECK(any_line(vs[0], "check the network path"));
        CHECK(any_line(vs[0], "issued #42, reached #42, completed #41, waiting 12.0 s"));  // exact: no label
    }
    SECTION("every rank inside, but the last joined less than the timeout ago: nothing proven yet") {
        // Rank 3 came late (a slow start under load) and joined 3 s ago; the others waited 12 s, mostly for it,
        // then for the op's first connection set-up: no transport is proven to hang, and nobody held it up long.
        std::vector<RankCommState> rs;
        for (int r = 0; r < 4; ++r) rs.push_back(waiting(r, 41, r == 3 ? 3.0 : 12.0));
        CHECK(diagnose_stall(view(4, rs), kNow, kTimeout).empty());
        // At timeout 0 (a final verdict: the job is ending), what stands is said.
        auto at0 = diagnose_stall(view(4, rs), kNow, 0.0);
        REQUIRE(at0.size() == 1);
        CHECK(at0[0].kind == Kind::StuckInNccl);
    }
    SECTION("CUDA events: reached, and a pending event right after the op") {
        auto vs = diagnose_stall(view(4, four_waiting(42, 0, 42)), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
    }
    SECTION("a call that has not returned is inside NCCL") {
        auto rs = four_waiting(41);
        for (auto& r : rs) r.returned = 41;
        auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
    }
    SECTION("one rank whose exact counts say it has not reached the op: GPU_NOT_REACHED instead") {
        std::vector<RankCommState> rs;
        for (int r = 0; r < 4; ++r) rs.push_back(waiting(r, 41, 12.0));
        rs[3].reached = 41;
        auto vs = diagnose_stall(view(4, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::GpuNotReached);
        CHECK(vs[0].culprits == Ranks{3});
        CHECK(any_line(vs[0], "its counts are exact"));
    }
}

TEST_CASE("proven: a peer's completion raises what it proves, never past a rank's own proof", "[verdict]") {
    // Rank 2 completed #41 (idle); ranks 0 and 1 lag at #39. Rank 0's pending event after #40 proves #40 not
    // completed there: it joined #40 (rank 2's completion says so) and is inside it; rank 1 is counted done to #41.
    auto r0 = lower_bounds(waiting(0, 39, 12.0, 42), 0, 40);
    auto r1 = lower_bounds(waiting(1, 39, 12.0, 42));
    r0.reached = r1.reached = 39;
    auto vs = diagnose_stall(view(3, {r0, r1, idle(2, 41)}), kNow, kTimeout);
    REQUIRE(!vs.empty());
    CHECK(vs[0].seq == 40);
    // Rank 0 proven inside #40 (joined, not completed); the others past it: one op cannot be both, so the ops were not
    // paired as numbered. Never STUCK_IN_NCCL ("check the network path") while a rank completed the op (issue 25).
    CHECK(vs[0].kind == Kind::Unknown);
    CHECK(vs[0].completed_it == Ranks{1, 2});
    CHECK(any_line(vs[0], "not STUCK_IN_NCCL: ranks 1,2 completed #40, so the transport carried it"));
    CHECK(vs[0].waiting == Ranks{0});
    CHECK(any_line(vs[0], "counted as reached (#40 is proven not completed)"));
    CHECK(any_line(vs[0], "#40..#41 not completed on record"));

    SECTION("exact counts are not raised") {
        auto e0 = waiting(0, 39, 12.0, 42);
        auto e1 = waiting(1, 39, 12.0, 42);
        auto es = diagnose_stall(view(3, {e0, e1, idle(2, 41)}), kNow, kTimeout);
        REQUIRE(!es.empty());
        CHECK(es[0].seq == 40);
        CHECK(!any_line(es[0], "not completed on record"));
    }

    SECTION("a peer whose communicator broke proves nothing: the abort ends its kernels, not the op") {
        for (int how = 0; how < 3; ++how) {
            auto b2 = idle(2, 41);
            if (how == 0) b2.async_error = 6;  // ncclRemoteError, from ncclCommGetAsyncError
            if (how == 1) {                    // a call that failed with ncclRemoteError
                b2.ops_failed = 1;
                b2.first_failed_seq = 42;
                b2.first_failed_result = 6;
            }
            if (how == 2) b2.comm_state = uint32_t(ncw::disk::CommState::Aborted);
            auto bs = diagnose_stall(view(3, {r0, r1, b2}), kNow, kTimeout);
            INFO("how " << how);
            for (const auto& v : bs) CHECK(!any_line(v, "not completed on record"));
        }
        // A call refused for its arguments does not break the communicator: its completions still prove.
        auto a2 = idle(2, 41);
        a2.ops_failed = 1;
        a2.first_failed_seq = 0;
        a2.first_failed_result = 4;  // ncclInvalidArgument
        auto as = diagnose_stall(view(3, {r0, r1, a2}), kNow, kTimeout);
        REQUIRE(!as.empty());
        CHECK(any_line(as[0], "#40..#41 not completed on record"));
    }
}

TEST_CASE("proven: point-to-point with lower-bound counts is not called stuck", "[verdict]") {
    auto p2p = [](int r, PeerP2p e, bool bounds) {
        RankCommState s = idle(r, 10);
        if (bounds) s = lower_bounds(s);
        s.p2p_known = true;
        s.p2p = {e};
        return s;
    };
    auto pe = [](int peer, uint64_t si, uint64_t sc, uint64_t ri, uint64_t rc) {
        PeerP2p e;
        e.peer = peer;
        e.sends_issued = si, e.sends_completed = sc, e.recvs_issued = ri, e.recvs_completed = rc;
        e.sends_reached = si, e.recvs_reached = ri;
        if (si > sc) e.t_oldest_send_pending_ns = ago(30.0);
        if (ri > rc) e.t_oldest_recv_pending_ns = ago(30.0);
        return e;
    };
    auto vs =
        diagnose_stall(view(2, {p2p(0, pe(1, 5, 4, 0, 0), true), p2p(1, pe(0, 0, 0, 5, 4), true)}), kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::Unknown);
    CHECK(contains(vs[0].summary, "whether the pending ops of ranks 0,1 finished is not known"));
    CHECK(!blames_transport(vs));
    auto ws =
        diagnose_stall(view(2, {p2p(0, pe(1, 5, 4, 0, 0), false), p2p(1, pe(0, 0, 0, 5, 4), false)}), kNow, kTimeout);
    REQUIRE(ws.size() == 1);
    CHECK(ws[0].kind == Kind::StuckInNccl);
}

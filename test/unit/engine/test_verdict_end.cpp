// FAILED (verdict_end.h): the ranks torch's NCCL watchdog ended, and what it timed out; and the causal order's view of
// such an end (causal.h): a wait given up, never a death of the rank's own.
#include "engine/causal.h"
#include "engine/verdict_end.h"
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

// Rank r, ended by torch's watchdog `at_ago` seconds ago (SIGABRT raised in pt_nccl_watchdg).
RankCommState torch_ended(RankCommState r, double at_ago) {
    r.end_kind = uint32_t(ncw::disk::EndKind::FatalSignal);
    r.end_status = 6;  // SIGABRT
    r.end_thread = "pt_nccl_watchdg";
    r.end_mono_ns = ago(at_ago);
    r.alive = false;
    return r;
}

// A job of 4 ranks: ranks 1-3 wait in AllReduce #10 since 30 s ago, rank 0 never issued it; the watchdog ended ranks
// 1-3 20 s after their issue, the launcher rank 0 (SIGTERM) 0.1 s later.
CommView timed_out() {
    std::vector<RankCommState> ranks{idle(0, 9, 31.0)};
    ranks[0].end_kind = uint32_t(ncw::disk::EndKind::Terminated);
    ranks[0].end_status = 15;
    ranks[0].end_mono_ns = ago(9.9);
    ranks[0].alive = false;
    for (int r = 1; r < 4; ++r) ranks.push_back(torch_ended(waiting(r, 9, 30.0), 10.0));
    return view(4, std::move(ranks));
}

}  // namespace

TEST_CASE("verdict: an end by torch's NCCL watchdog", "[verdict]") {
    SECTION("told by the thread: SIGABRT in pt_nccl_watchdg, or an abort from it and an end since") {
        RankCommState r = torch_ended(waiting(1, 9, 30.0), 10.0);
        CHECK(ended_by_torch_watchdog(r));
        r.end_thread = "python";  // the program's own abort()
        CHECK_FALSE(ended_by_torch_watchdog(r));
        r.abort_thread = "pt_nccl_watchdg";
        r.abort_mono_ns = ago(12.0);
        CHECK(ended_by_torch_watchdog(r));
        CHECK(torch_watchdog_end_ns(r) == ago(12.0));
        r.end_kind = 0;  // aborted, still running (TORCH_NCCL_ASYNC_ERROR_HANDLING=2): not an end
        CHECK_FALSE(ended_by_torch_watchdog(r));
        // Its launcher's SIGTERM first (a peer had died), the watchdog's abort after: the launcher ended it.
        r.end_kind = uint32_t(ncw::disk::EndKind::Terminated);
        r.end_status = 15;
        r.end_thread = "python";
        r.end_mono_ns = ago(13.0);
        CHECK_FALSE(ended_by_torch_watchdog(r));
        r.end_mono_ns = ago(11.0);  // the abort first: the watchdog's
        CHECK(ended_by_torch_watchdog(r));
    }
    SECTION("the causal order: the ended ranks gave up waiting, the launcher's SIGTERM a consequence; no DEAD") {
        CommView v = timed_out();
        const auto ends = torch_watchdog_ends({&v});
        REQUIRE(ends.size() == 3);
        CHECK(ends[0].thread == "pt_nccl_watchdg");
        const CausalOrder c = order_causally({&v}, kNow);
        CHECK(c.any);
        CHECK_FALSE(c.ended_together);
        for (const auto& r : v.ranks) CHECK(r.alive);  // all judged as they stood when the watchdog ended them
        auto vs = diagnose_stall(v, ago(10.0), 0.0);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(find_kind(vs, Kind::Dead) == nullptr);
    }
    // The timed-out job's verdicts as the engine orders them: its stall's, then FAILED put first.
    auto judged = [](double ranks_timeout_s, double torch_timeout_s) {
        CommView v = timed_out();
        const auto ends = torch_watchdog_ends({&v});
        order_causally({&v}, kNow);
        std::vector<Verdict> vs = diagnose_stall(v, ago(10.0), 0.0);
        std::vector<CommVerdicts> cv{{&v, &vs}};
        lead_with_torch_watchdog(cv, ends, ranks_timeout_s, torch_timeout_s);
        return vs;
    };
    SECTION("FAILED leads, the stall it timed out keeps its words after it") {
        const std::vector<Verdict> vs = judged(60.0, 0.0);
        REQUIRE(vs.size() >= 2);
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
            return contains(e, "NCCLWATCH_TIMEOUT_SEC=60 is longer than the 20.0 s wait torch's timeout ended");
        }));
        CHECK(vs[0].kind == Kind::Failed);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(vs[0].waiting == Ranks{1, 2, 3});
        CHECK(vs[0].seq == 10);
        CHECK(vs[0].stalled_for_s == Approx(20.0).margin(0.01));
        CHECK(contains(vs[0].summary,
                       "torch's NCCL watchdog ended ranks 1,2,3 (SIGABRT raised in its thread "
                       "pt_nccl_watchdg); the stall they were in: NOT_JOINED"));
        CHECK(vs[1].kind == Kind::NotJoined);
        CHECK_FALSE(vs[1].consequence);
        CHECK(vs[0].torch_timeout_s == 0);  // not known: the launcher's hook did not run
    }
    SECTION("torch's timeout, where the launcher's hook read it, is the verdict's and beside ncclwatch's") {
        const std::vector<Verdict> vs = judged(10.0, 15.0);
        REQUIRE(vs[0].kind == Kind::Failed);
        CHECK(vs[0].torch_timeout_s == 15.0);
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "torch's process-group timeout: 15 s"); }));
    }
    SECTION("the wait over before the end: the op that waited longest on them, and the rank whose issue released it") {
        // Rank 0 issued #10 25 s after the others (5 s ago); all completed it; the watchdog ended ranks 1-3 just now.
        std::vector<RankCommState> ranks{idle(0, 10, 4.0)};
        ranks[0].recent.mut().back().t_issue_ns = ago(5.0);
        for (int r = 1; r < 4; ++r) {
            RankCommState s = idle(r, 10, 4.0);
            s.recent.mut().back().t_issue_ns = ago(30.0);
            ranks.push_back(torch_ended(s, 0.5));
        }
        CommView v = view(4, std::move(ranks));
        const auto ends = torch_watchdog_ends({&v});
        std::vector<Verdict> vs;
        std::vector<CommVerdicts> cv{{&v, &vs}};
        lead_with_torch_watchdog(cv, ends);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(vs[0].seq == 10);
        CHECK(vs[0].stalled_for_s == Approx(25.0).margin(0.01));
        CHECK(contains(vs[0].summary, "the longest wait on them: AllReduce #10"));
        CHECK(contains(vs[0].summary, "it completed, after torch's timeout had passed"));
    }
    SECTION("ops queued behind the same late rank: the oldest named, as torch's watchdog times its work in order") {
        // Ranks 1-3 issued #9 30 s ago and #10 29.9 s ago; rank 0 issued #9 5.5 s ago and #10 5 s ago: #9 waited
        // 24.5 s, #10 24.9 s. Torch timed out #9 (its "SeqNum="), the older, queued first on the same late rank.
        std::vector<RankCommState> ranks{idle(0, 10, 4.0)};
        ranks[0].recent.mut()[ranks[0].recent.size() - 2].t_issue_ns = ago(5.5);
        ranks[0].recent.mut().back().t_issue_ns = ago(5.0);
        for (int r = 1; r < 4; ++r) {
            RankCommState s = idle(r, 10, 4.0);
            s.recent.mut()[s.recent.size() - 2].t_issue_ns = ago(30.0);
            s.recent.mut().back().t_issue_ns = ago(29.9);
            ranks.push_back(torch_ended(s, 0.5));
        }
        CommView v = view(4, std::move(ranks));
        std::vector<Verdict> vs;
        std::vector<CommVerdicts> cv{{&v, &vs}};
        lead_with_torch_watchdog(cv, torch_watchdog_ends({&v}));
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].seq == 9);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(vs[0].stalled_for_s == Approx(24.5).margin(0.01));
    }
    SECTION("one node's files, the rank it waited for on the other: the op named, its holder out of sight") {
        CommView v = timed_out();
        v.ranks.erase(v.ranks.begin());  // rank 0's file is on the other node
        std::vector<Verdict> vs;
        std::vector<CommVerdicts> cv{{&v, &vs}};
        lead_with_torch_watchdog(cv, torch_watchdog_ends({&v}));
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].seq == 10);
        CHECK(vs[0].culprits.empty());
        CHECK(vs[0].missing == Ranks{0});
        CHECK(vs[0].stalled_for_s == Approx(20.0).margin(0.01));
    }
    SECTION("no op of theirs waited: no culprit named, the reason is torch's log's") {
        std::vector<RankCommState> ranks{idle(0, 10, 4.0), torch_ended(idle(1, 10, 4.0), 0.5)};
        for (auto& r : ranks) r.recent.mut().back().t_issue_ns = ago(5.0);
        CommView v = view(2, std::move(ranks));
        std::vector<Verdict> vs;
        std::vector<CommVerdicts> cv{{&v, &vs}};
        lead_with_torch_watchdog(cv, torch_watchdog_ends({&v}));
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].culprits.empty());
        CHECK(contains(vs[0].summary, "no op of theirs had waited a second"));
    }
}

// Causal order across a job's communicators (engine/causal.h).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/causal.h"
#include "engine/verdict.h"
#include "ncclwatch/format.h"

using namespace ncw;
using namespace ncw::verdict;

namespace {

constexpr uint64_t kMs = 1'000'000ull;
constexpr uint64_t kT = 100'000 * kMs;  // the first departure

RankCommState rank(int comm_rank, int global, uint64_t issued, uint64_t completed) {
    RankCommState r;
    r.comm_rank = comm_rank;
    r.global_rank = global;
    r.host = "vm";
    r.pid = 1000 + global;
    r.issued = r.reached = issued;
    r.completed = completed;
    return r;
}

void ends(RankCommState& r, disk::EndKind kind, int status, uint64_t at) {
    r.alive = false;
    r.end_kind = uint32_t(kind);
    r.end_status = status;
    r.end_mono_ns = at;
}

}  // namespace

TEST_CASE("causal: a rank whose op failed on one communicator is a consequence on all of them", "[causal]") {
    // The GPU grid's death: global 5 exits (code 3) at T. Global 6's AllReduce #20 on TP fails 50 ms later
    // (ncclRemoteError), and torch aborts it (SIGABRT) 100 ms after T, within the window taken as simultaneous. On
    // DP, where global 6's op did not fail, it departed "at the first moment" too: it must still be the TP failure's
    // consequence there, alive and waiting at T, not a first departure (DEAD) of its own.
    CommView tp;
    tp.comm_id = 0x47;
    tp.nranks = 2;
    tp.ranks = {rank(0, 5, 10, 10), rank(1, 6, 20, 19)};
    ends(tp.ranks[0], disk::EndKind::Exit, 3, kT);
    tp.ranks[1].ops_failed = 1;
    tp.ranks[1].first_failed_seq = 20;
    tp.ranks[1].first_failed_result = 6;
    tp.ranks[1].t_first_failed_ns = kT + 50 * kMs;
    ends(tp.ranks[1], disk::EndKind::FatalSignal, 6, kT + 100 * kMs);
    CommView dp;
    dp.comm_id = 0x26;
    dp.nranks = 2;
    dp.ranks = {rank(0, 2, 2, 0), rank(1, 6, 19, 0)};
    ends(dp.ranks[1], disk::EndKind::FatalSignal, 6, kT + 100 * kMs);

    const CausalOrder o = order_causally({&tp, &dp}, kT + 5000 * kMs);
    REQUIRE(o.any);
    CHECK(o.first_ns == kT);
    CHECK_FALSE(o.first_from_outside);
    CHECK_FALSE(tp.ranks[0].alive);  // the culprit stays departed
    CHECK(dp.ranks[1].alive);
    CHECK(dp.ranks[1].end_kind == uint32_t(disk::EndKind::None));
    CHECK(tp.ranks[1].alive);
    bool noted = false;
    for (const auto& n : o.notes)
        noted = noted ||
                (n.find("global 6") != std::string::npos && n.find("failed (ncclRemoteError 6)") != std::string::npos &&
                 n.find("then it crashed with SIGABRT") != std::string::npos);
    CHECK(noted);
}

TEST_CASE("causal: an asynchronous error seen after the first departure, with nothing outstanding, is its consequence",
          "[causal]") {
    // Rank 1 exits (code 3) at T. Rank 0 had completed all it issued when ncclCommGetAsyncError said ncclRemoteError
    // 40 ms later (first_failed_seq 0: no op failed), then issued #11, which waits. Its error is the departure's
    // consequence, not an ASYNC_ERROR of its own.
    CommView v;
    v.comm_id = 0x11;
    v.nranks = 2;
    v.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10)};
    ends(v.ranks[1], disk::EndKind::Exit, 3, kT);
    v.ranks[0].async_error = 6;
    v.ranks[0].ops_failed = 1;
    v.ranks[0].first_failed_seq = 0;
    v.ranks[0].first_failed_result = 6;
    v.ranks[0].t_first_failed_ns = kT + 40 * kMs;
    const CausalOrder o = order_causally({&v}, kT + 5000 * kMs);
    REQUIRE(o.any);
    CHECK(o.first_ns == kT);
    CHECK(v.ranks[0].async_error == 0);
    CHECK_FALSE(v.ranks[1].alive);

    SECTION("an error before the departure stays") {
        CommView w;
        w.comm_id = 0x12;
        w.nranks = 2;
        w.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10)};
        ends(w.ranks[1], disk::EndKind::Exit, 3, kT);
        w.ranks[0].async_error = 6;
        w.ranks[0].ops_failed = 1;
        w.ranks[0].first_failed_result = 6;
        w.ranks[0].t_first_failed_ns = kT - 500 * kMs;
        order_causally({&w}, kT + 5000 * kMs);
        CHECK(w.ranks[0].async_error == 6);
    }
}

TEST_CASE("causal: a clean exit with a time (the live collector's Bye) is a first departure", "[causal]") {
    // Rank 1 ran its exit handlers at T (its Bye came then; its exit code never did). Rank 0's op failed 50 ms later
    // (ncclRemoteError: the peer's connection closed): the consequence, not the first event.
    CommView v;
    v.comm_id = 0x13;
    v.nranks = 2;
    v.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10)};
    v.ranks[1].alive = false;
    v.ranks[1].exited_clean = true;
    v.ranks[1].end_mono_ns = kT;
    v.ranks[0].ops_failed = 1;
    v.ranks[0].first_failed_seq = 11;
    v.ranks[0].first_failed_result = 6;
    v.ranks[0].t_first_failed_ns = kT + 50 * kMs;
    const CausalOrder o = order_causally({&v}, kT + 5000 * kMs);
    REQUIRE(o.any);
    CHECK(o.first_ns == kT);
    CHECK_FALSE(v.ranks[1].alive);
    CHECK(v.ranks[1].exited_clean);
}

TEST_CASE("causal: a peer that destroyed its communicator and then exited caused its peers' remote error", "[causal]") {
    // Rank 1 ran out of data: destroy_process_group() at T - 1.5 s closed its connections, and its process ended at T
    // (its exit handlers, Python's teardown). Rank 0's op failed with ncclRemoteError at T - 1.4 s, before that end:
    // the error is rank 1 going away, not a first event of its own.
    CommView v;
    v.comm_id = 0x14;
    v.nranks = 2;
    v.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10)};
    ends(v.ranks[1], disk::EndKind::Exit, 0, kT);
    v.ranks[1].comm_state = uint32_t(disk::CommState::Destroyed);
    v.ranks[0].async_error = 6;
    v.ranks[0].ops_failed = 1;
    v.ranks[0].first_failed_seq = 11;
    v.ranks[0].first_failed_result = 6;
    v.ranks[0].t_first_failed_ns = kT - 1400 * kMs;
    const CausalOrder o = order_causally({&v}, kT + 5000 * kMs);
    REQUIRE(o.any);
    CHECK(o.first_ns == kT);
    CHECK_FALSE(v.ranks[1].alive);  // the departure stays the cause: DEAD
    CHECK(v.ranks[0].alive);

    SECTION("a peer whose communicator was still up when it exited: an error before its end stays the first") {
        CommView w = v;
        w.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10)};
        ends(w.ranks[1], disk::EndKind::Exit, 0, kT);
        w.ranks[1].comm_state = uint32_t(disk::CommState::Active);
        w.ranks[0].ops_failed = 1;
        w.ranks[0].first_failed_seq = 11;
        w.ranks[0].first_failed_result = 6;
        w.ranks[0].t_first_failed_ns = kT - 1400 * kMs;
        const CausalOrder p = order_causally({&w}, kT + 5000 * kMs);
        CHECK(p.first_ns == kT - 1400 * kMs);
    }
}

TEST_CASE("causal: a SIGTERM beside a kill in the first moment is the launcher's teardown, not a second culprit",
          "[causal]") {
    // Rank 1 was SIGKILLed (no end recorded; its heartbeat stopped at T). Its node's launcher SIGTERMed rank 2 100 ms
    // later, within the window taken as simultaneous: rank 1 alone departed first.
    CommView v;
    v.comm_id = 0x15;
    v.nranks = 3;
    v.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10), rank(2, 2, 11, 10)};
    const uint64_t now = kT + 5000 * kMs;
    v.ranks[1].alive = false;
    v.ranks[1].heartbeat_age_s = 5.0;  // gone at T
    ends(v.ranks[2], disk::EndKind::Terminated, 15, kT + 100 * kMs);
    const CausalOrder o = order_causally({&v}, now);
    REQUIRE(o.any);
    CHECK(o.first_ns == kT);
    CHECK_FALSE(v.ranks[1].alive);
    CHECK(v.ranks[2].alive);  // put back: a consequence
    CHECK_FALSE(o.ended_together);
    bool noted = false;
    for (const auto& n : o.notes) noted = noted || n.find("terminated by SIGTERM") != std::string::npos;
    CHECK(noted);

    SECTION("every first departure a SIGTERM: the first moment itself (a job ended from outside)") {
        CommView w;
        w.comm_id = 0x16;
        w.nranks = 2;
        w.ranks = {rank(0, 0, 11, 10), rank(1, 1, 11, 10)};
        ends(w.ranks[0], disk::EndKind::Terminated, 15, kT);
        ends(w.ranks[1], disk::EndKind::Terminated, 15, kT + 20 * kMs);
        const CausalOrder p = order_causally({&w}, now);
        CHECK(p.ended_together);
    }
}

TEST_CASE("causal: a SIGTERM the program's handler took is told beside the end it really had", "[causal]") {
    // Format 1.13 (issue 45): rank 1's handler took a SIGTERM 1 s before T and trained on.
    CommView v;
    v.comm_id = 0x17;
    v.nranks = 3;
    v.ranks = {rank(0, 0, 11, 10), rank(1, 1, 10, 10), rank(2, 2, 11, 10)};
    const uint64_t now = kT + 5000 * kMs;
    v.ranks[1].absorbed_signal = 15;
    v.ranks[1].absorbed_mono_ns = kT - 1000 * kMs;

    SECTION("it ran out of work and exited 0: an exit 0, never 'terminated'") {
        ends(v.ranks[1], disk::EndKind::Exit, 0, kT);
        CHECK_FALSE(exit_on_signal(v.ranks[1]));
        CHECK_FALSE(ended_by_term_signal(v.ranks[1]));
        const std::string w = end_words(v.ranks[1]);
        CHECK(w == "exited (exit code 0); its own handler had taken SIGTERM (signal 15) and it went on");
    }
    SECTION("an exit with a code within 5 s of it: its answer to the signal, a launcher's teardown beside a kill") {
        v.ranks[0].alive = false;
        v.ranks[0].heartbeat_age_s = 5.0;  // SIGKILLed at T
        ends(v.ranks[1], disk::EndKind::Exit, 143, kT + 100 * kMs);
        v.ranks[1].absorbed_mono_ns = kT - 400 * kMs;
        CHECK(exit_on_signal(v.ranks[1]));
        CHECK(end_words(v.ranks[1]) ==
              "exited (exit code 143) in answer to SIGTERM (signal 15), which its own handler took 0.5 s before");
        const CausalOrder o = order_causally({&v}, now);
        REQUIRE(o.any);
        CHECK_FALSE(v.ranks[0].alive);
        CHECK(v.ranks[1].alive);  // put back: a consequence of rank 0's kill, not a second culprit
    }
    SECTION("an exit with a code long after it: its own end") {
        ends(v.ranks[1], disk::EndKind::Exit, 3, kT + 6000 * kMs);
        CHECK_FALSE(exit_on_signal(v.ranks[1]));
    }
}

TEST_CASE("causal: a job ended from outside while a send or receive had waited past the timeout was hung", "[causal]") {
    // A pipeline: no collective outstanding, rank 3's receive from rank 2 pending for 12 s when every rank was
    // SIGTERMed together.
    CommView v;
    v.comm_id = 0x17;
    v.nranks = 4;
    for (int r = 0; r < 4; ++r) v.ranks.push_back(rank(r, r, 0, 0));
    PeerP2p e;
    e.peer = 2;
    e.recvs_issued = 61, e.recvs_completed = 60, e.t_oldest_recv_pending_ns = kT - 12000 * kMs;
    v.ranks[3].p2p = {e};
    CHECK(hung_before({&v}, kT, 10.0));
    CHECK_FALSE(hung_before({&v}, kT - 3000 * kMs, 10.0));  // 9 s then: not yet
}

TEST_CASE("causal: a stall that began just before a kill was not a hang before it", "[causal]") {
    // rank_killed at two nodes: rank 1's last completion was 25 ms before rank 3's SIGKILL (a shared GPU behind its
    // CPU), so its shim's stall, reported 10 s later, begins then. At the kill it had not lasted the timeout: the
    // kill is the first event, not the end of a hang.
    CommView v;
    v.comm_id = 0x19;
    v.nranks = 4;
    for (int r = 0; r < 4; ++r) v.ranks.push_back(rank(r, r, 47, 46));
    v.ranks[1].stall_since_ns = kT - 25 * kMs;
    v.ranks[1].t_last_progress_ns = kT - 25 * kMs;
    v.ranks[1].t_last_issue_ns = kT - 10 * kMs;
    CHECK_FALSE(hung_before({&v}, kT, 10.0));
    CHECK(hung_before({&v}, kT + 10000 * kMs, 10.0));  // a stall that had lasted 10 s by then
}

TEST_CASE("causal: ranks that destroyed a blocking communicator and then exited 0 completed its ops", "[causal]") {
    // A clean job's end: every rank issued its last 1-element all_reduce #618 (its GPU started it), called
    // destroy_process_group() and exited 0, ranks 0 and 2 0.2 s before ranks 1 and 3. The exit cut off NCCL's
    // profiler events for the last kernel, so #618 reads "not completed" on every rank. The destroy returned (each
    // process exited after it): #618 completed, and nobody waited for the first two to leave.
    CommView v;
    v.comm_id = 0x18;
    v.nranks = 4;
    for (int i = 0; i < 4; ++i) {
        v.ranks.push_back(rank(i, i, 618, 617));
        v.ranks[i].comm_state = uint32_t(disk::CommState::Destroyed);
        v.ranks[i].progress_exact = true;
        v.ranks[i].gpu_tracking = true;
        ends(v.ranks[i], disk::EndKind::Exit, 0, i % 2 ? kT + 200 * kMs : kT);
    }
    CommView w = v;  // the same, variations below
    const CausalOrder o = order_causally({&v}, kT + 1000 * kMs);
    for (const auto& r : v.ranks) CHECK(r.completed == 618);
    CHECK(diagnose_stall(v, o.first_ns, 10.0).empty());

    SECTION("aborted, or exited with another code, or an error: not credited") {
        w.ranks[1].comm_state = uint32_t(disk::CommState::Aborted);
        w.ranks[2].end_status = 7;  // a guard thread's os._exit(7) while the teardown may have hung
        w.ranks[3].async_error = 6;
        order_causally({&w}, kT + 1000 * kMs);
        CHECK(w.ranks[0].completed == 618);
        CHECK(w.ranks[1].completed == 617);
        CHECK(w.ranks[2].completed == 617);
        CHECK(w.ranks[3].completed == 617);
    }
    SECTION("a nonblocking communicator: its teardown returns before the flush") {
        for (auto& r : w.ranks) r.blocking = 0;
        order_causally({&w}, kT + 1000 * kMs);
        for (const auto& r : w.ranks) CHECK(r.completed == 617);
    }
}

// The watchdog's decision (shim/watch/stall_decision.h) over a clock of the test's own and progress facts made up
// poll by poll: when a stall is reported (once), when it recovers, what an idle communicator never is, when a wait is
// put to the engine as suspected, and when an init hangs. The facts of a real progress block, as the recorder leaves
// them, for the op issued into an idle communicator and the wait of the oldest incomplete collective.
#include <catch2/catch.hpp>

#include "engine/suspicion.h"
#include "shim/watch/stall_decision.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;

namespace {

constexpr uint64_t kS = 1000000000ull;
constexpr uint64_t kMs = 1000000ull;

StallLimits limits(double timeout_s = 60, bool suspect = true) {
    StallLimits lim;
    lim.timeout_s = timeout_s;
    lim.suspect = suspect;
    return lim;
}

// `outstanding` ops issued and not completed, the last progress at `since`.
ProgressFacts waiting(uint64_t since, uint64_t completed = 10, uint64_t outstanding = 1) {
    ProgressFacts f;
    f.issued = completed + outstanding;
    f.completed = completed;
    f.last_progress_ns = f.wait_began_ns = since;
    return f;
}

// A communicator busy in a steady rhythm: every poll (100 ms) sees 10 more ops completed, one every `gap` (the last
// at the poll), one still outstanding. From `t`, `polls` polls; returns the facts of the last.
ProgressFacts rhythm(StallClock& c, uint64_t& t, int polls, uint64_t gap = 10 * kMs,
                     const StallLimits& lim = limits()) {
    ProgressFacts f = waiting(t, 0);
    for (int i = 0; i < polls; ++i) {
        t += 10 * gap;
        f = waiting(t, f.completed + 10);
        CHECK(c.poll(f, t, lim).step == StallStep::None);
    }
    return f;
}

StallStep step(StallClock& c, const ProgressFacts& f, uint64_t now, const StallLimits& lim = limits()) {
    return c.poll(f, now, lim).step;
}

}  // namespace

TEST_CASE("no stall before the timeout, one at it, and none again while it lasts") {
    StallClock c;
    const uint64_t t0 = 1000 * kS;
    const ProgressFacts f = waiting(t0);
    for (uint64_t now = t0; now < t0 + 60 * kS; now += 5 * kS) CHECK(step(c, f, now) == StallStep::None);
    CHECK(step(c, f, t0 + 60 * kS - 1) == StallStep::None);
    const StallDecision d = c.poll(f, t0 + 60 * kS, limits());
    CHECK(d.step == StallStep::Stalled);
    CHECK(d.since_ns == t0);
    CHECK(d.waited_s == Approx(60.0));
    CHECK(d.suspected_at_s == -1);
    CHECK(c.stall_reported());
    for (uint64_t now = t0 + 61 * kS; now < t0 + 600 * kS; now += 7 * kS) CHECK(step(c, f, now) == StallStep::None);
    // The clock as it stands when the last progress lies in the future (a clock anchor moved): no stall.
    StallClock later;
    CHECK(step(later, waiting(t0 + 100 * kS), t0) == StallStep::None);
}

TEST_CASE("a stall recovers once its communicator makes progress, and can stall again") {
    StallClock c;
    const uint64_t t0 = 1000 * kS;
    REQUIRE(step(c, waiting(t0), t0 + 60 * kS) == StallStep::Stalled);
    // Counted done without GPU evidence (the count moves, the progress time does not): still stalled.
    ProgressFacts f = waiting(t0, 11, 2);
    CHECK(step(c, f, t0 + 70 * kS) == StallStep::None);
    // The GPU moved.
    f = waiting(t0 + 80 * kS, 12, 1);
    const StallDecision d = c.poll(f, t0 + 81 * kS, limits());
    CHECK(d.step == StallStep::Recovered);
    CHECK(d.was_stall);
    CHECK_FALSE(d.by_failure);
    CHECK(d.waited_s == Approx(81.0));
    CHECK_FALSE(c.reported());
    // A new wait from that progress: a new stall, a timeout later.
    CHECK(step(c, f, t0 + 80 * kS + 60 * kS - 1) == StallStep::None);
    CHECK(step(c, f, t0 + 140 * kS) == StallStep::Stalled);
    // Nothing outstanding any more (the last op completed, its progress time older than the report's): recovered.
    CHECK(step(c, waiting(t0 + 80 * kS, 13, 0), t0 + 150 * kS) == StallStep::Recovered);
}

TEST_CASE("a stall ended by a failed call is an end, not a recovery; after an abort it is forgotten") {
    StallClock c;
    const uint64_t t0 = 1000 * kS;
    REQUIRE(step(c, waiting(t0), t0 + 60 * kS) == StallStep::Stalled);
    ProgressFacts f = waiting(t0);
    f.failed = 1;  // the op failed: ended, not outstanding
    f.failed_calls = 1;
    const StallDecision d = c.poll(f, t0 + 65 * kS, limits());
    CHECK(d.step == StallStep::Recovered);
    CHECK(d.by_failure);

    StallClock aborted;
    REQUIRE(step(aborted, waiting(t0), t0 + 60 * kS) == StallStep::Stalled);
    aborted.forget_stall();  // NCCLWATCH_ACTION=abort
    CHECK(step(aborted, f, t0 + 61 * kS) == StallStep::None);
}

TEST_CASE("an idle communicator never stalls, nor does one whose only op failed") {
    StallClock c;
    ProgressFacts idle = waiting(5 * kS, 40, 0);
    for (uint64_t now = 5 * kS; now < 10000 * kS; now += 333 * kS) CHECK(step(c, idle, now) == StallStep::None);
    ProgressFacts failed = waiting(5 * kS, 40, 1);
    failed.failed = 1;
    CHECK_FALSE(failed.outstanding());
    CHECK(step(c, failed, 20000 * kS) == StallStep::None);
}

TEST_CASE("an op issued into an idle communicator starts the stall clock at its issue") {
    TempDir dir("ncw_stall");
    RankFileWriter f = create_rank_file(dir.path.string(), test_identity(), 256, 0);
    CommRuntime* cr = make_comm(f, 0x51);
    const disk::CommSlot& s = f.comms[0];
    StallClock c;
    OpRef first = record_issue(f, *cr, coll(disk::OpType::AllReduce, 1024), IssueOptions{}, 1 * kS);
    record_return(f, first, ncclSuccess, 1 * kS + 10);
    record_done(f, first, 2 * kS);
    // An hour idle, then an op: its wait began at its issue, not at the last completion.
    for (uint64_t now = 2 * kS; now < 3600 * kS; now += 600 * kS)
        CHECK(step(c, read_progress(s, 0), now) == StallStep::None);
    record_issue(f, *cr, coll(disk::OpType::AllReduce, 1024), IssueOptions{}, 3600 * kS);
    const ProgressFacts facts = read_progress(s, 0);
    CHECK(facts.last_progress_ns == 3600 * kS);
    CHECK(facts.wait_began_ns == 3600 * kS);
    CHECK(step(c, facts, 3600 * kS + 60 * kS - 1) == StallStep::None);
    const StallDecision d = c.poll(facts, 3660 * kS, limits());
    CHECK(d.step == StallStep::Stalled);
    CHECK(d.since_ns == 3600 * kS);
}

TEST_CASE("the wait of the oldest incomplete collective begins at its issue, if later than the last progress") {
    TempDir dir("ncw_stall");
    RankFileWriter f = create_rank_file(dir.path.string(), test_identity(), 256, 0);
    CommRuntime* cr = make_comm(f, 0x52);
    const disk::CommSlot& s = f.comms[0];
    // A receive outstanding since 1 s (it started the clock), then an all-reduce issued at 5 s.
    record_issue(f, *cr, p2p(disk::OpType::Recv, 1), IssueOptions{}, 1 * kS);
    record_issue(f, *cr, coll(disk::OpType::AllReduce, 64), IssueOptions{}, 5 * kS);
    ProgressFacts facts = read_progress(s, 3);
    CHECK(facts.issued == 2);
    CHECK(facts.outstanding());
    CHECK(facts.last_progress_ns == 1 * kS);
    CHECK(facts.wait_began_ns == 5 * kS);
    CHECK(facts.failed_calls == 3);
    // The signature rewritten under the reader (its seq not the one wanted): the last progress.
    f.comms[0].recent[1 % disk::kRecentSigs].seq.store(0);
    CHECK(read_progress(s, 0).wait_began_ns == 1 * kS);
}

TEST_CASE("a wait past the baseline's threshold is put to the engine, and asked again less and less often") {
    StallClock c;
    uint64_t t = 100 * kS;
    ProgressFacts f =
        rhythm(c, t, 5);  // 40 gaps of 10 ms (the first poll only starts the count), 5 of them the warm-up
    REQUIRE(c.p99_ns() > 10 * kMs);
    REQUIRE(c.p99_ns() < 11 * kMs);
    const double after = verdict::suspect_after_s(c.p99_ns());
    CHECK(after == Approx(5.0));  // 20 x 10 ms is under the floor
    const uint64_t since = f.last_progress_ns;
    CHECK(step(c, f, since + 5 * kS - 1) == StallStep::None);
    StallDecision d = c.poll(f, since + 5 * kS, limits());
    CHECK(d.step == StallStep::AskSuspect);
    CHECK(d.since_ns == since);
    CHECK(d.after_s == Approx(5.0));
    CHECK(d.waited_s == Approx(5.0));
    // The engine does not agree: asked again after 1 s, 2 s, 4 s, 8 s, 8 s.
    c.suspect_declined(since + 5 * kS);
    uint64_t at = since + 5 * kS;
    for (uint64_t backoff : {1, 2, 4, 8, 8}) {
        CHECK(step(c, f, at + backoff * kS - 1) == StallStep::None);
        at += backoff * kS;
        REQUIRE(step(c, f, at) == StallStep::AskSuspect);
        c.suspect_declined(at);
    }
    // It agrees: suspected once, not asked again, no stall before the timeout.
    at += 8 * kS;
    REQUIRE(step(c, f, at) == StallStep::AskSuspect);
    c.suspect_confirmed(since, at, f);
    CHECK(c.suspected());
    CHECK_FALSE(c.stall_reported());
    CHECK(c.suspected_wait_s() == Approx(double(at - since) / kS));
    for (uint64_t now = at + 1 * kS; now < since + 60 * kS; now += 1 * kS) CHECK(step(c, f, now) == StallStep::None);
    // The timeout confirms it as the stall, which says when it was suspected.
    d = c.poll(f, since + 60 * kS, limits());
    CHECK(d.step == StallStep::Stalled);
    CHECK(d.suspected_at_s == Approx(double(at - since) / kS));
    CHECK_FALSE(c.suspected());
}

TEST_CASE("a suspicion that progress ends before the timeout recovered, never a stall, and is no gap of the rhythm") {
    StallClock c;
    uint64_t t = 100 * kS;
    ProgressFacts f = rhythm(c, t, 5);
    const uint64_t p99 = c.p99_ns();
    const uint64_t since = f.last_progress_ns;
    REQUIRE(step(c, f, since + 6 * kS) == StallStep::AskSuspect);
    c.suspect_confirmed(since, since + 6 * kS, f);
    f = waiting(since + 7 * kS, f.completed + 1);
    const StallDecision d = c.poll(f, since + 7 * kS + 50 * kMs, limits());
    CHECK(d.step == StallStep::Recovered);
    CHECK_FALSE(d.was_stall);
    CHECK(d.waited_s == Approx(7.05));
    CHECK(c.p99_ns() == p99);  // the 7 s gap was left out
    CHECK_FALSE(d.p99_changed);
}

TEST_CASE("the engine is asked from the start of the wait it judges, the later of last progress and issue") {
    StallClock c;
    uint64_t t = 100 * kS;
    ProgressFacts f = rhythm(c, t, 5);
    f.wait_began_ns = f.last_progress_ns + 3 * kS;  // the oldest incomplete collective was issued 3 s later
    CHECK(step(c, f, f.last_progress_ns + 7 * kS) == StallStep::None);
    CHECK(step(c, f, f.last_progress_ns + 8 * kS) == StallStep::AskSuspect);
}

TEST_CASE("no suspicion without a baseline, with suspicion off, or with a threshold not below the timeout") {
    const uint64_t t0 = 100 * kS;
    SECTION("fewer gaps than a baseline needs") {
        StallClock c;
        uint64_t t = t0;
        const ProgressFacts f = rhythm(c, t, 3);  // 20 gaps, 5 of them the warm-up: 15 of the 20 a baseline needs
        CHECK(c.p99_ns() == 0);
        for (uint64_t now = t; now < t + 60 * kS; now += 1 * kS) CHECK(step(c, f, now) == StallStep::None);
        CHECK(step(c, f, t + 60 * kS) == StallStep::Stalled);
    }
    SECTION("suspicion off") {
        StallClock c;
        uint64_t t = t0;
        const ProgressFacts f = rhythm(c, t, 5, 10 * kMs, limits(60, false));
        CHECK(c.p99_ns() == 0);
        for (uint64_t now = t; now < t + 60 * kS; now += 1 * kS)
            CHECK(step(c, f, now, limits(60, false)) == StallStep::None);
    }
    SECTION("a slow, steady rhythm: a 5.5 s wait is short of 20 x its p99") {
        StallClock c;
        uint64_t t = t0;
        const ProgressFacts f = rhythm(c, t, 5, 300 * kMs);
        CHECK(verdict::suspect_after_s(c.p99_ns()) > 6.0);
        CHECK(step(c, f, t + 5500 * kMs) == StallStep::None);
    }
    SECTION("the threshold at the timeout") {
        StallClock c;
        uint64_t t = t0;
        const ProgressFacts f = rhythm(c, t, 5, 10 * kMs, limits(5));
        for (uint64_t now = t; now < t + 5 * kS; now += 500 * kMs) CHECK(step(c, f, now, limits(5)) == StallStep::None);
        CHECK(step(c, f, t + 5 * kS, limits(5)) == StallStep::Stalled);
    }
}

TEST_CASE("the baseline's p99 is published when it changes") {
    StallClock c;
    uint64_t t = 100 * kS;
    ProgressFacts f = rhythm(c, t, 3);
    REQUIRE(c.p99_ns() == 0);
    t += 100 * kMs;
    f = waiting(t, f.completed + 10);
    StallDecision d = c.poll(f, t, limits());
    CHECK(d.p99_changed);
    CHECK(c.p99_ns() > 0);
    t += 100 * kMs;
    f = waiting(t, f.completed + 10);
    CHECK_FALSE(c.poll(f, t, limits()).p99_changed);
}

TEST_CASE("an init hangs once past the timeout; past 8 s it is put to the engine every 2 s until it agrees") {
    const uint64_t t0 = 500 * kS;
    StallClock c;
    CHECK(c.poll_init(t0, t0 - 1, limits()).step == StallStep::None);  // started after this poll's clock
    CHECK(c.poll_init(t0, t0 + 8 * kS - 1, limits()).step == StallStep::None);
    StallDecision d = c.poll_init(t0, t0 + 8 * kS, limits());
    CHECK(d.step == StallStep::AskSuspect);
    CHECK(d.waited_s == Approx(verdict::kInitSuspectS));
    // Not agreed: again 2 s later.
    CHECK(c.poll_init(t0, t0 + 10 * kS - 1, limits()).step == StallStep::None);
    REQUIRE(c.poll_init(t0, t0 + 10 * kS, limits()).step == StallStep::AskSuspect);
    c.init_suspect_confirmed(t0);
    CHECK(c.suspected());
    for (uint64_t now = t0 + 12 * kS; now < t0 + 60 * kS; now += 2 * kS)
        CHECK(c.poll_init(t0, now, limits()).step == StallStep::None);
    d = c.poll_init(t0, t0 + 60 * kS, limits());
    CHECK(d.step == StallStep::InitHang);
    CHECK(d.since_ns == t0);
    CHECK(d.waited_s == Approx(60.0));
    CHECK(c.poll_init(t0, t0 + 61 * kS, limits()).step == StallStep::None);
    CHECK(c.poll_init(t0, t0 + 6000 * kS, limits()).step == StallStep::None);

    StallClock quiet;  // suspicion off: the hang alone
    for (uint64_t now = t0; now < t0 + 60 * kS; now += 1 * kS)
        CHECK(quiet.poll_init(t0, now, limits(60, false)).step == StallStep::None);
    CHECK(quiet.poll_init(t0, t0 + 60 * kS, limits(60, false)).step == StallStep::InitHang);
}

TEST_CASE("a suspected init that finishes recovered, suspected only, after the time since the init began") {
    const uint64_t t0 = 500 * kS;
    StallClock c;
    REQUIRE(c.poll_init(t0, t0 + 8 * kS, limits()).step == StallStep::AskSuspect);
    c.init_suspect_confirmed(t0);
    // The init returned; the communicator is idle.
    const StallDecision d = c.poll(waiting(t0 + 20 * kS, 0, 0), t0 + 20 * kS, limits());
    CHECK(d.step == StallStep::Recovered);
    CHECK_FALSE(d.was_stall);
    CHECK(d.waited_s == Approx(20.0));
}

TEST_CASE("a destroyed communicator's reported stall is finished by the progress it made") {
    StallClock c;
    const uint64_t t0 = 1000 * kS;
    CHECK(c.finish(waiting(t0 + 1 * kS, 11), t0 + 2 * kS).step == StallStep::None);  // nothing reported
    REQUIRE(step(c, waiting(t0), t0 + 60 * kS) == StallStep::Stalled);
    CHECK(c.finish(waiting(t0), t0 + 61 * kS).step == StallStep::None);  // no progress since
    const StallDecision d = c.finish(waiting(t0 + 62 * kS, 11), t0 + 63 * kS);
    CHECK(d.step == StallStep::Recovered);
    CHECK(d.was_stall);
    CHECK(d.waited_s == Approx(63.0));
    CHECK(c.finish(waiting(t0 + 64 * kS, 12), t0 + 65 * kS).step == StallStep::None);  // once
}

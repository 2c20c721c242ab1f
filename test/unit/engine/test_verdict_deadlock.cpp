// DEADLOCK: stalls on two communicators of every rank that wait on each other (verdict_deadlock.h), from the engine's
// own verdicts of hand-built views.
#include <catch2/catch.hpp>
#include <vector>

#include "../verdict_fixtures.h"
#include "engine/cascade.h"
#include "engine/verdict_deadlock.h"

using namespace verdict_fixtures;
using namespace ncw;
using namespace ncw::verdict;

namespace {

using Ranks = std::vector<int>;
constexpr uint64_t kA = 0xa, kB = 0xb;

CommView on(uint64_t id, std::vector<RankCommState> ranks) {
    CommView v = view(int(ranks.size()), std::move(ranks));
    v.comm_id = id;
    return v;
}

// Ranks 0-2 wait in A's #6 and never issued B's #6; rank 3 the other way round.
struct Swapped {
    CommView a = on(kA, {waiting(0, 5, 30), waiting(1, 5, 30), waiting(2, 5, 30), idle(3, 5, 30)});
    CommView b = on(kB, {idle(0, 5, 30), idle(1, 5, 30), idle(2, 5, 30), waiting(3, 5, 30)});
    std::vector<Verdict> va, vb;
    void judge() {
        va = diagnose_stall(a, kNow, kTimeout);
        vb = diagnose_stall(b, kNow, kTimeout);
        std::vector<CommVerdicts> cv{{&a, &va}, {&b, &vb}};
        assign_cascade_roles(cv);
        find_deadlocks(cv);
    }
};

}  // namespace

TEST_CASE("deadlock: two communicators used in different orders", "[deadlock]") {
    Swapped s;
    s.judge();
    const Verdict* d = find_kind(s.va, Kind::Deadlock);
    REQUIRE(d);
    CHECK(find_kind(s.vb, Kind::Deadlock) == nullptr);  // one verdict, where the most ranks wait
    CHECK(d->culprits == Ranks{3});                     // the rank whose order differs
    CHECK(d->waiting == Ranks{0, 1, 2});
    CHECK(d->role == Role::Initiating);
    REQUIRE(d->cycle.size() == 2);
    CHECK(d->cycle[0].comm_id == kA);
    CHECK(d->cycle[0].for_global == Ranks{3});
    CHECK(d->cycle[1].comm_id == kB);
    CHECK(d->cycle[1].waiting_global == Ranks{3});
    CHECK(d->cycle[1].for_global == Ranks{0, 1, 2});
    CHECK(contains(d->summary, "they issued their ops on these communicators in different orders"));
    // The two stalls follow from it: A's NOT_JOINED, B's EXTRA_OP (its others looked at rest there).
    for (const auto* vs : {&s.va, &s.vb})
        for (const auto& v : *vs)
            if (v.kind != Kind::Deadlock) {
                CHECK(v.consequence);
                CHECK(contains(v.consequence_of, "the deadlock between communicators"));
            }
    const Verdict* extra = find_kind(s.vb, Kind::ExtraOp);
    REQUIRE(extra);
    CHECK(extra->role == Role::Cascade);
    CHECK(extra->caused_by_comm == kA);
}

TEST_CASE("deadlock: one side's wait not past the timeout yet", "[deadlock]") {
    // Rank 3 entered B's op a moment after ranks 0-2 entered A's: only A's stall has lasted the timeout. The positions
    // close the cycle all the same.
    Swapped s;
    s.b = on(kB, {idle(0, 5, 30), idle(1, 5, 30), idle(2, 5, 30), waiting(3, 5, 5)});
    s.judge();
    REQUIRE(s.vb.empty());
    const Verdict* d = find_kind(s.va, Kind::Deadlock);
    REQUIRE(d);
    CHECK(d->culprits == Ranks{3});
    REQUIRE(d->cycle.size() == 2);
    CHECK(d->cycle[1].comm_id == kB);
    CHECK(find_kind(s.va, Kind::NotJoined)->consequence);
    SECTION("neither side past the timeout: nothing yet") {
        Swapped t;
        t.a = on(kA, {waiting(0, 5, 5), waiting(1, 5, 5), waiting(2, 5, 5), idle(3, 5, 5)});
        t.b = on(kB, {idle(0, 5, 5), idle(1, 5, 5), idle(2, 5, 5), waiting(3, 5, 5)});
        t.judge();
        CHECK(find_kind(t.va, Kind::Deadlock) == nullptr);
        CHECK(find_kind(t.vb, Kind::Deadlock) == nullptr);
    }
}

TEST_CASE("deadlock: none where the chain ends outside the cycle", "[deadlock]") {
    SECTION("rank 3 is idle, not inside B's op: a plain NOT_JOINED") {
        Swapped s;
        s.b = on(kB, {idle(0, 5, 30), idle(1, 5, 30), idle(2, 5, 30), idle(3, 5, 30)});
        s.judge();
        CHECK(find_kind(s.va, Kind::Deadlock) == nullptr);
        REQUIRE(find_kind(s.va, Kind::NotJoined));
        CHECK(!find_kind(s.va, Kind::NotJoined)->consequence);
    }
    SECTION("one of the ranks B waits for is not inside A's op") {
        Swapped s;
        s.a = on(kA, {waiting(0, 5, 30), waiting(1, 5, 30), idle(2, 5, 30), idle(3, 5, 30)});
        s.judge();
        CHECK(find_kind(s.va, Kind::Deadlock) == nullptr);
        CHECK(find_kind(s.vb, Kind::Deadlock) == nullptr);
    }
    SECTION("a rank it waits for is gone: DEAD, not a deadlock") {
        Swapped s;
        s.a.ranks[3].alive = false;
        s.judge();
        CHECK(find_kind(s.va, Kind::Deadlock) == nullptr);
    }
}

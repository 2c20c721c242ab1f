// TEARDOWN_HANG: ranks inside a communicator teardown for the timeout (verdict_teardown.cpp).
#include <catch2/catch.hpp>
#include <vector>

#include "../verdict_fixtures.h"

using namespace verdict_fixtures;
using namespace ncw;
using namespace ncw::verdict;

namespace {

using Ranks = std::vector<int>;

RankCommState tearing_down(RankCommState r, double for_s) {
    r.teardown_since_ns = ago(for_s);
    r.teardown_op = uint32_t(disk::OpType::CommDestroy);
    r.comm_state = uint32_t(disk::CommState::Destroyed);
    return r;
}

}  // namespace

TEST_CASE("teardown: a destroy past the timeout names its ranks", "[verdict]") {
    CommView v = view(4, {tearing_down(idle(0, 9), 30), tearing_down(idle(1, 9), 30), idle(2, 9), idle(3, 9)});
    v.ranks[2].comm_state = v.ranks[3].comm_state = uint32_t(disk::CommState::Active);
    const auto vs = diagnose_teardown(v, kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::TeardownHang);
    CHECK(vs[0].culprits == Ranks{0, 1});
    CHECK(vs[0].stalled_for_s == Approx(30.0));
    CHECK(contains(vs[0].summary, "ranks 0,1 have been inside ncclCommDestroy for 30.0 s"));
    CHECK(contains(vs[0].summary, "every op they issued here completed"));
    CHECK(contains(vs[0].summary, "ranks 2,3 have not begun their teardown"));
}

TEST_CASE("teardown: none within the timeout, nor for a rank gone", "[verdict]") {
    CommView v = view(2, {tearing_down(idle(0, 9), 3), tearing_down(idle(1, 9), 30)});
    v.ranks[1].alive = false;
    CHECK(diagnose_teardown(v, kNow, kTimeout).empty());
}

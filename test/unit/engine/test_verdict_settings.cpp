// SETTING_DIFFERS: a stall in a job whose ranks disagree on a setting NCCL needs them to agree on
// (verdict_settings.h), over the engine's own verdicts of hand-built views.
#include <catch2/catch.hpp>
#include <vector>

#include "../verdict_fixtures.h"
#include "engine/verdict_settings.h"

using namespace verdict_fixtures;
using namespace ncw;
using namespace ncw::verdict;

namespace {

using Ranks = std::vector<int>;

audit::Finding algo_on_3() {
    audit::Finding f;
    f.severity = audit::Severity::Error;
    f.topic = "setting_mismatch";
    f.summary = "NCCL_ALGO differs across ranks: rank 3 has 'Tree'; the majority (3 of 4) has 'Ring'";
    f.evidence = {"NCCL_ALGO 'Tree' on rank 3", "each rank picks every op's algorithm from its own NCCL_ALGO"};
    f.ranks = {3};
    return f;
}

}  // namespace

TEST_CASE("settings: a difference leads a stall that names no rank", "[settings]") {
    CommView v = view(4, {waiting(0, 0, 30), waiting(1, 0, 30), waiting(2, 0, 30), waiting(3, 0, 30)});
    std::vector<Verdict> vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(find_kind(vs, Kind::StuckInNccl));
    lead_with_settings({algo_on_3()}, {{&v, &vs}});
    const Verdict* s = find_kind(vs, Kind::SettingDiffers);
    REQUIRE(s);
    CHECK(s->culprits == Ranks{3});
    CHECK(s->seq == 1);
    CHECK(s->waiting == Ranks{0, 1, 2, 3});
    CHECK(contains(s->setting, "NCCL_ALGO differs across ranks: rank 3 has 'Tree'"));
    CHECK(contains(s->summary, "each rank picks every op's algorithm"));
    const Verdict* stuck = find_kind(vs, Kind::StuckInNccl);
    CHECK(stuck->consequence);  // "check the network path" is no longer a cause
    CHECK(contains(stuck->consequence_of, "NCCL_ALGO"));
}

TEST_CASE("settings: a stall that names its culprit keeps the lead", "[settings]") {
    CommView v = view(4, {waiting(0, 5, 30), waiting(1, 5, 30), waiting(2, 5, 30), idle(3, 5, 30)});
    std::vector<Verdict> vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(find_kind(vs, Kind::NotJoined));
    lead_with_settings({algo_on_3()}, {{&v, &vs}});
    REQUIRE(find_kind(vs, Kind::SettingDiffers));
    CHECK(!find_kind(vs, Kind::NotJoined)->consequence);
    CHECK(verdict_importance(Kind::NotJoined) < verdict_importance(Kind::SettingDiffers));
}

TEST_CASE("settings: nothing without a stall, or where the odd rank is not a member", "[settings]") {
    CommView idle_view = view(4, {idle(0, 5), idle(1, 5), idle(2, 5), idle(3, 5)});
    std::vector<Verdict> none;
    lead_with_settings({algo_on_3()}, {{&idle_view, &none}});
    CHECK(none.empty());
    CommView three = view(3, {waiting(0, 0, 30), waiting(1, 0, 30), waiting(2, 0, 30)});
    std::vector<Verdict> vs = diagnose_stall(three, kNow, kTimeout);
    lead_with_settings({algo_on_3()}, {{&three, &vs}});
    CHECK(find_kind(vs, Kind::SettingDiffers) == nullptr);
}

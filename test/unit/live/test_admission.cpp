// What the live collector lets in (live/admission.h) and the wrong-token naming (live/log_limiter.h's KeyedLimiter):
// a claimed communicator size never sizes the analysis, a training job is never evicted for room, connections
// without a Hello give way oldest first.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "live/admission.h"
#include "live/log_limiter.h"

using namespace ncw;

namespace {

CommInfo comm(uint64_t id, int rank, int nranks, uint64_t completed) {
    CommInfo c;
    c.comm_id = id;
    c.rank = rank;
    c.nranks = nranks;
    c.coll_completed = completed;
    return c;
}

}  // namespace

TEST_CASE("admission: a communicator claiming more ranks than a job may hold is set aside") {
    std::vector<CommInfo> comms = {comm(1, 0, 8, 0), comm(2, 0, 1 << 20, 0), comm(3, 9, 8, 0), comm(4, 3, 65536, 0)};
    CHECK(live::set_aside_oversized(comms, 65536) == 2);
    REQUIRE(comms.size() == 2);
    CHECK(comms[0].comm_id == 1);
    CHECK(comms[1].comm_id == 4);
    CHECK(live::set_aside_oversized(comms, 8) == 1);
}

TEST_CASE("admission: progress is a communicator completing more than it had") {
    CHECK(live::shows_progress({comm(1, 0, 2, 5)}, {comm(1, 0, 2, 6)}));
    CHECK_FALSE(live::shows_progress({comm(1, 0, 2, 5)}, {comm(1, 0, 2, 5)}));
    CHECK_FALSE(live::shows_progress({}, {comm(1, 0, 2, 50)}));  // a first digest proves nothing moved
    CHECK_FALSE(live::shows_progress({comm(1, 0, 2, 5)}, {comm(2, 0, 2, 9)}));
}

TEST_CASE("admission: a rank's estimate grows with what it holds") {
    FileSnapshot a;
    const size_t empty = live::snapshot_bytes(a);
    CHECK(empty > 1024);
    a.header.env.assign(100, std::string(100, 'x'));
    a.comms.assign(10, comm(1, 0, 2, 0));
    CHECK(live::snapshot_bytes(a) > empty + 100 * 100 + 10 * sizeof(CommInfo));
}

TEST_CASE("admission: the victim for room is finished, then idle, then connected without progress; never training") {
    using J = live::JobWeight;
    std::vector<J> jobs = {J{"train", true, false, true, 10}, J{"fake-old", true, false, false, 20},
                           J{"fake-new", true, false, false, 30}};
    CHECK(live::pick_victim(jobs, -1) == 1);
    CHECK(live::pick_victim(jobs, 1) == 2);
    jobs.push_back(J{"idle", false, false, false, 40});
    CHECK(live::pick_victim(jobs, -1) == 3);
    jobs.push_back(J{"done", false, true, false, 50});
    CHECK(live::pick_victim(jobs, -1) == 4);
    // An idle job that was training goes last (its ranks may be reconnecting); a connected one never.
    CHECK(live::pick_victim({J{"a", true, false, true, 1}, J{"b", false, false, true, 2}}, -1) == 1);
    CHECK(live::pick_victim({J{"a", true, false, true, 1}, J{"b", true, false, true, 2}}, -1) == -1);
}

// Issue 45: growing counts are a claim too. 4,096 fake jobs whose counts grew held every real rank out ("collector
// full"); a rank that proves who it is takes the room of one whose ranks proved nothing, never of a proven one.
TEST_CASE("admission: for a proven newcomer, a training job none of whose ranks is proven gives way; a proven never") {
    using J = live::JobWeight;
    const J fake_old{"fake-old", true, false, true, 10, false}, fake_new{"fake-new", true, false, true, 20, false},
        real{"real", true, false, true, 5, true};
    CHECK(live::pick_victim({real, fake_new, fake_old}, -1) == -1);       // an unproven newcomer: none
    CHECK(live::pick_victim({real, fake_new, fake_old}, -1, true) == 2);  // proven: the least recently heard fake
    CHECK(live::pick_victim({real, fake_new, fake_old}, 2, true) == 1);   // never `keep`
    CHECK(live::pick_victim({real, J{"idle", false, false, false, 30}, fake_old}, -1, true) == 1);  // idle first
    CHECK(live::pick_victim({real}, -1, true) == -1);  // a proven training job: never
}

TEST_CASE("admission: connections without a Hello give way oldest first, in all and per address") {
    live::Unproven u;
    for (uint64_t id = 1; id <= 4; ++id) u.add(id, "127.0.0.1");
    u.add(5, "10.0.0.2");
    CHECK(u.size() == 5);
    CHECK(u.victim("10.0.0.3", 10, 4) == 0);
    CHECK(u.victim("127.0.0.1", 10, 4) == 1);  // that address holds its share
    CHECK(u.victim("10.0.0.3", 5, 4) == 1);    // all together hold theirs
    u.remove(1);
    CHECK(u.of_ip("127.0.0.1") == 3);
    CHECK(u.victim("127.0.0.1", 10, 4) == 0);
    u.remove(5);
    CHECK(u.of_ip("10.0.0.2") == 0);
    CHECK(u.victim("10.0.0.2", 3, 4) == 2);
}

TEST_CASE("log_limiter: a key is named once per period, a bounded number of keys, the flood counted apart") {
    live::KeyedLimiter k;
    k.period_ns = 1000;
    k.max_keys = 2;
    CHECK(k.allow("J\n1", 1));
    CHECK_FALSE(k.allow("J\n1", 2));
    CHECK(k.allow("J\n2", 3));
    CHECK_FALSE(k.allow("J\n3", 4));  // full
    CHECK(k.allow("J\n3", 1002));     // the first key's period is over: room again
    CHECK(k.allow("J\n1", 1003));

    live::LogLimiter l;
    for (int i = 0; i < 30; ++i) l.allow("wrong token", 1);
    l.allow("bad magic", 1);
    for (int i = 0; i < 20; ++i) l.allow("bad magic", 1);
    CHECK(l.take_suppressed("wrong token") == 20);
    CHECK(l.take_summary() == "bad magic: 11");
}

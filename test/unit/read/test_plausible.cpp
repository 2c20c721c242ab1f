// Counters checked before they are believed (issue 28, point 3): what read/plausible.h calls impossible, and what it
// lets through (a live slot's counters read one after the other; nanosecond fields, which are times).
#include <catch2/catch.hpp>

#include "read/plausible.h"

using namespace ncw;

namespace {

CommInfo ordinary() {
    CommInfo c;
    c.coll_issued = 1000;
    c.coll_returned = 1000;
    c.coll_reached = 999;
    c.coll_completed = 998;
    c.ops_issued = 1200;
    return c;
}

}  // namespace

TEST_CASE("ordinary counters pass, and so does a live slot read while it moved") {
    CHECK(impossible_counter(ordinary()).empty());
    CommInfo c = ordinary();
    c.coll_completed = c.coll_issued + 5000;  // completions read after the issue count: a lead, not damage
    CHECK(impossible_counter(c).empty());
    c.completion_gap_p99_ns = ~0ull;  // a time: read/time_base's concern, not a count
    CHECK(impossible_counter(c).empty());
    c.coll_issued = kMaxPlausibleCount;
    CHECK(impossible_counter(c).empty());
}

TEST_CASE("a count no process could have written is named") {
    CommInfo c = ordinary();
    c.coll_issued = ~0ull;
    CHECK(impossible_counter(c) == "coll_issued 18446744073709551615 is more than any process could have issued");
    c = ordinary();
    c.p2p_recvs = kMaxPlausibleCount + 1;
    CHECK(impossible_counter(c).rfind("p2p_recvs 4503599627370497 ", 0) == 0);
    c = ordinary();
    c.coll_reached = c.coll_issued + kMaxTornLead + 1;
    CHECK(impossible_counter(c) ==
          "coll_reached 4294968297 is past coll_issued 1000 by more than any reading of a "
          "live slot could see");
    c = ordinary();
    verdict::OpSig s;
    s.seq = ~0ull;
    c.recent = CowVector<verdict::OpSig>(std::vector<verdict::OpSig>{s});
    CHECK(impossible_counter(c) == "a signature's seq 18446744073709551615 is more than any process could have issued");
    c = ordinary();
    c.gpu_spans.push_back({~0ull, 1, 1});
    CHECK(impossible_counter(c).rfind("a GPU time's seq ", 0) == 0);
}

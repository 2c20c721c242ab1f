#include <catch2/catch.hpp>
#include <cstring>
#include <set>

#include "shim/record/comm_identity.h"

using namespace ncw;

TEST_CASE("ranks that pass the same unique id agree on the identity") {
    ncclUniqueId a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    strcpy(a.internal, "bootstrap-handle-1");
    strcpy(b.internal, "bootstrap-handle-1");
    CHECK(root_comm_id(a) == root_comm_id(b));
    b.internal[127] = 1;
    CHECK(root_comm_id(a) != root_comm_id(b));
}

TEST_CASE("split children: same (parent, counter, color) agree, anything else differs") {
    CHECK(child_comm_id(42, 1, 0) == child_comm_id(42, 1, 0));
    std::set<uint64_t> ids;
    for (uint64_t parent : {42ull, 43ull})
        for (uint64_t counter : {1ull, 2ull})
            for (int64_t color : {0, 1, 7}) ids.insert(child_comm_id(parent, counter, color));
    CHECK(ids.size() == 12);
}

TEST_CASE("shrink identities depend on the excluded ranks and never equal a split color's") {
    int ex1[] = {3};
    int ex2[] = {2};
    CHECK(shrink_comm_id(5, 1, ex1, 1) == shrink_comm_id(5, 1, ex1, 1));
    CHECK(shrink_comm_id(5, 1, ex1, 1) != shrink_comm_id(5, 1, ex2, 1));
    CHECK(shrink_comm_id(5, 1, nullptr, 0) != child_comm_id(5, 1, 0));
}

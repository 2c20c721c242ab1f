#include <catch2/catch.hpp>

#include "shim/record/comm_registry.h"

using namespace ncw;

TEST_CASE("find, replace a reused pointer, remove") {
    auto* reg = new CommRegistry;
    auto* a = new CommRuntime;
    auto* b = new CommRuntime;
    auto comm = reinterpret_cast<ncclComm_t>(0x1000);
    CHECK(reg->find(comm) == nullptr);
    CHECK(reg->insert(comm, a));
    CHECK(reg->find(comm) == a);
    reg->remove(comm);
    CHECK(reg->find(comm) == nullptr);
    CHECK(reg->insert(comm, b));  // NCCL handed the same pointer to a new communicator
    CHECK(reg->find(comm) == b);
    CHECK(reg->find(nullptr) == nullptr);
    int live = 0;
    reg->for_each([&](CommRuntime&) { ++live; });
    CHECK(live == 1);
}

TEST_CASE("colliding pointers probe past each other") {
    auto* reg = new CommRegistry;
    std::vector<CommRuntime*> crs;
    for (uintptr_t i = 1; i <= 500; ++i) {
        crs.push_back(new CommRuntime);
        REQUIRE(reg->insert(reinterpret_cast<ncclComm_t>(i << 20), crs.back()));
    }
    for (uintptr_t i = 1; i <= 500; ++i) CHECK(reg->find(reinterpret_cast<ncclComm_t>(i << 20)) == crs[i - 1]);
}

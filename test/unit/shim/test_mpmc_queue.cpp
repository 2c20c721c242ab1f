#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "shim/base/mpmc_queue.h"

using namespace ncw;

TEST_CASE("bounded: a full queue refuses instead of growing") {
    MpmcQueue<int> q(4);
    for (int i = 0; i < 4; ++i) CHECK(q.try_push(i));
    CHECK_FALSE(q.try_push(99));
    int v;
    for (int i = 0; i < 4; ++i) {
        REQUIRE(q.try_pop(v));
        CHECK(v == i);
    }
    CHECK_FALSE(q.try_pop(v));
}

TEST_CASE("many producers, one consumer: every item arrives once") {
    MpmcQueue<uint64_t> q(1024);
    constexpr int kProducers = 4;
    constexpr uint64_t kEach = 50000;
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
        producers.emplace_back([&, p] {
            for (uint64_t i = 0; i < kEach; ++i)
                while (!q.try_push((uint64_t(p) << 32) | i)) std::this_thread::yield();
        });
    std::vector<uint64_t> next(kProducers, 0);
    uint64_t got = 0;
    bool in_order = true;
    while (got < kProducers * kEach) {
        uint64_t v;
        if (!q.try_pop(v)) continue;
        int p = int(v >> 32);
        in_order = in_order && (v & 0xffffffff) == next[p];
        next[p]++;
        got++;
    }
    for (auto& t : producers) t.join();
    CHECK(in_order);  // per producer, FIFO
    CHECK(got == kProducers * kEach);
}

// read/cow_vector.h: copies share one vector until one of them is written; reads never copy.
#include <catch2/catch.hpp>
#include <thread>

#include "read/cow_vector.h"

using ncw::CowVector;

TEST_CASE("CowVector: copies share the elements; a write copies them only while another copy holds them") {
    CowVector<int> a = std::vector<int>{1, 2, 3};
    const CowVector<int> b = a;
    CHECK(&a.view() == &b.view());  // shared, not copied
    int sum = 0;
    for (const int x : a) sum += x;  // a non-const one read in a range-for: still shared
    CHECK(sum == 6);
    CHECK(&a.view() == &b.view());

    a.push_back(4);  // b still holds them: a gets its own
    CHECK(a.size() == 4);
    CHECK(b.size() == 3);
    CHECK(b.back() == 3);
    CHECK(&a.view() != &b.view());

    const std::vector<int>* own = &a.view();
    a.mut()[0] = 10;  // nobody else holds a's: written in place
    CHECK(&a.view() == own);
    CHECK(a[0] == 10);
    CHECK(b[0] == 1);
}

TEST_CASE("CowVector: empty, cleared and compared by elements") {
    CowVector<int> e;
    CHECK(e.empty());
    CHECK(e.size() == 0);
    CHECK(e.begin() == e.end());
    CHECK(e == CowVector<int>{});
    CowVector<int> a{5, 6};
    CowVector<int> c = std::vector<int>{5, 6};
    CHECK(a == c);
    a.clear();
    CHECK(a.empty());
    CHECK(c.size() == 2);
    a.assign(3, 7);
    CHECK(a == CowVector<int>{7, 7, 7});
    a = std::vector<int>{};
    CHECK(a.empty());
}

TEST_CASE("CowVector: a copy read on another thread while the owner writes its own") {
    CowVector<int> a = std::vector<int>(1000, 1);
    const CowVector<int> held = a;
    long seen = 0;
    std::thread reader([&] {
        for (int i = 0; i < 100; ++i)
            for (const int x : held) seen += x;
    });
    for (int i = 0; i < 100; ++i) a.mut()[size_t(i)] = 2;  // the first write copies; the reader's stays 1s
    reader.join();
    CHECK(seen == 100 * 1000);
    CHECK(a[0] == 2);
    CHECK(held[0] == 1);
}

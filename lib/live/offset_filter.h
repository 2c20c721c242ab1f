// A rank's clock moved onto the collector's, from the frames it sends: a one-way minimum filter over the last
// kWindow samples of (receive time - send time). Its own job, apart from the server that feeds it (live_server.cpp):
// a pure value with no I/O.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace ncw::live {

// One-way minimum filter: offset = min over the last kWindow samples of (receive time - send time), i.e. the rank's
// clock moved onto ours plus the smallest one-way delay seen. The spread of the window bounds how noisy it is.
struct OffsetFilter {
    static constexpr size_t kWindow = 64;
    std::array<int64_t, kWindow> samples{};
    size_t count = 0;
    size_t next = 0;
    bool exact = false;  // same boot as the collector: the clocks are one clock, offset 0

    void add(int64_t v) {
        samples[next] = v;
        next = (next + 1) % kWindow;
        count = std::min(count + 1, kWindow);
    }
    int64_t offset() const {
        if (exact || !count) return 0;
        return *std::min_element(samples.begin(), samples.begin() + count);
    }
    int64_t spread() const {
        if (exact || !count) return 0;
        auto [lo, hi] = std::minmax_element(samples.begin(), samples.begin() + count);
        return *hi - *lo;
    }
};

}  // namespace ncw::live

// One clock for a job's files (read/time_base.h): one boot is exact, unless a writer's monotonic clock is shifted.
#include <catch2/catch.hpp>

#include "read/time_base.h"

using namespace ncw;

namespace {

constexpr uint64_t kS = 1'000'000'000ull;

HeaderInfo writer(uint64_t boot, uint64_t start_mono, uint64_t start_real) {
    HeaderInfo h;
    h.boot_id_hash = boot;
    h.start_mono_ns = start_mono;
    h.start_real_ns = start_real;
    return h;
}

}  // namespace

TEST_CASE("time base: one boot is exact; a monotonic clock shifted on it (a time namespace) goes by the wall clocks") {
    const time_base::Frame now{0xb007, 50'000 * kS, 1'700'000'000 * kS};
    // Started 100 s ago on this boot, its wall clock a step of 0.3 s apart (NTP): exact, as it always was.
    const HeaderInfo same = writer(0xb007, 49'900 * kS, 1'700'000'000 * kS - 100 * kS + 300'000'000);
    CHECK(time_base::offset_to(same, now) == 0);
    CHECK(time_base::monotonic_shift(same, now) == 0);
    // Issue 45: the same start, but its CLOCK_MONOTONIC 2,000 s behind (unshare --time): its instants are moved 2,000 s
    // on, as the wall clocks tell, and the readers name it.
    const HeaderInfo shifted = writer(0xb007, 47'900 * kS, 1'700'000'000 * kS - 100 * kS);
    CHECK(time_base::offset_to(shifted, now) == int64_t(2'000 * kS));
    CHECK(time_base::monotonic_shift(shifted, now) == int64_t(2'000 * kS));
    // Another boot: through the wall clocks, never named as shifted.
    const HeaderInfo other = writer(0x07e1, 10 * kS, 1'700'000'000 * kS - 100 * kS);
    CHECK(time_base::offset_to(other, now) == int64_t(49'890 * kS));
    CHECK(time_base::monotonic_shift(other, now) == 0);
    // No wall anchor: nothing to tell by; exact on one boot.
    CHECK(time_base::offset_to(writer(0xb007, 47'900 * kS, 0), now) == 0);
}

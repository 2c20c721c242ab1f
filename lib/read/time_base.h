// Putting the timestamps of rank files on one clock. Every timestamp in a file is its writer's CLOCK_MONOTONIC; the
// offline analysis, the live collector and the watchdog move them onto the clock they analyse on by an offset
// (exact on one boot, through the realtime anchors across boots, or measured over the wire).
#pragma once

#include <time.h>

#include <cstdint>

#include "read/rank_file.h"

namespace ncw::time_base {

// clock_gettime(id) in nanoseconds.
uint64_t clock_ns(clockid_t id) noexcept;

// t moved by d nanoseconds. 0 means "never" and stays 0; a result that would fall to 0 or below is 1.
uint64_t shift(uint64_t t, int64_t d) noexcept;

// The clock a job is analysed on: one boot's CLOCK_MONOTONIC, with `mono` and `real` naming the same instant ("now").
struct Frame {
    uint64_t boot = 0;
    uint64_t mono = 0;
    uint64_t real = 0;
};

// Offset that moves a file's monotonic timestamps onto the frame's clock. Exact (0) on the same boot; across boots
// it goes through both realtime anchors, so it is as good as the hosts' clock synchronisation. On the same boot, a
// writer whose monotonic clock disagrees with the frame's by more than kShiftedNs, as both wall clocks tell, runs in a
// time namespace (or its anchor is forged): its times go through the wall clocks too (monotonic_shift).
int64_t offset_to(const HeaderInfo& h, const Frame& f) noexcept;

// (real - monotonic) moves on one boot only when the wall clock is stepped (NTP's slewing moves both alike): a
// difference past this between two processes of one boot is a shifted monotonic clock, not a step.
inline constexpr int64_t kShiftedNs = 10'000'000'000;
// How far the file's monotonic clock is off the frame's on the same boot, as the wall clocks tell: 0 when it is not
// (within kShiftedNs), or on another boot. The readers name such a rank.
int64_t monotonic_shift(const HeaderInfo& h, const Frame& f) noexcept;

// A monotonic instant of the file as wall-clock time (0 if the file has no realtime anchor or it predates the start).
uint64_t to_real(const HeaderInfo& h, uint64_t mono) noexcept;

// Every CLOCK_MONOTONIC instant of a comm slot (the fields whose SHOW is mono in include/ncclwatch/format_fields.h,
// and those of its signatures) moved by d.
void rebase(CommInfo& c, int64_t d) noexcept;

}  // namespace ncw::time_base

// Counters are checked before they are believed. A damaged or forged file (or frame) can hold any value; one counter
// no process could have written (coll_issued 2^64-1) would otherwise put its rank far ahead of the others and turn a
// NOT_JOINED into another verdict. The engine names such a value and sets aside that file's claims on that
// communicator (engine/job_view.cpp), so the rank reads as not visible: unknown, never blamed or believed.
#pragma once

#include <cstdint>
#include <string>

#include "read/rank_file.h"

namespace ncw {

// No process issues more ops than this: an NCCL call costs at least ~200 ns of CPU, so 2^52 of them take more than
// 28 years of one thread's time.
inline constexpr uint64_t kMaxPlausibleCount = uint64_t(1) << 52;
// How far a progress counter may run past coll_issued in a reader's copy of a live slot (the counters are read one
// after the other, not as one): 2^32 ops would take a writer over 15 minutes, more than any copy of a slot lasts.
inline constexpr uint64_t kMaxTornLead = uint64_t(1) << 32;

// The most ops a process could have issued in its life so far, as its header tells (its start to its last
// heartbeat): one per nanosecond, the rate of a CUDA graph's replay of thousands of captured ops, which a rank's record
// counts one by one, and no call comes near; plus kLifeSlack. kMaxPlausibleCount where the header tells no life (a
// writer without its times). A counter of 2^40 in a process that started a minute ago is a forgery, not a count.
inline constexpr uint64_t kLifeSlack = uint64_t(1) << 20;
uint64_t max_count_in_life(const HeaderInfo& h) noexcept;

// "" when every count and sequence number of `c` (its counters, signatures and GPU times) is one a process could
// have written, at most `max_count` (max_count_in_life); else the first that is not, in words ("coll_issued
// 18446744073709551615 is more than ...").
std::string impossible_counter(const CommInfo& c, uint64_t max_count = kMaxPlausibleCount);

}  // namespace ncw

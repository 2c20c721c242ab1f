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

// "" when every count and sequence number of `c` (its counters, signatures and GPU times) is one a process could
// have written; else the first that is not, in words ("coll_issued 18446744073709551615 is more than ...").
std::string impossible_counter(const CommInfo& c);

}  // namespace ncw

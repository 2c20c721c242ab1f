// The rank file's own mapping, kept safe from whoever cuts the file. A page of a MAP_SHARED mapping past the end of
// its file raises SIGBUS on access: a cleanup script, a quota or an operator that truncates a running rank's file
// would kill the rank at its next record. The fatal-signal handler (watch/process_end.cpp) asks own_mapping_rescue
// first: a fault inside the mapping is answered by anonymous memory in place of the pages lost, from the faulting
// page up to those replaced before, and the faulting access then goes on there. What the cut took is gone (zeros);
// recording goes on in memory, and the watchdog says so once (own_mapping_cut_at).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncw {

// The file-backed mapping [base, base + size); called once the rank file is mapped (not for anonymous memory).
void own_mapping_set(void* base, size_t size) noexcept;
// Async-signal-safe: true when `addr` lies in the mapping and the pages from its page to the end of what is still
// file-backed are now anonymous memory (the access may be retried); false for any other address.
bool own_mapping_rescue(const void* addr) noexcept;
// The offset from which the mapping is anonymous memory (0: never rescued), for the watchdog's one message.
uint64_t own_mapping_cut_at() noexcept;

}  // namespace ncw

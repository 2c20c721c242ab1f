// Snapshots of many rank files at once, for the offline analysis (`ncclwatch-collector analyze` of thousands of
// files): each file is read on its own by one of a few threads, and the results come back in the order of the paths,
// so the report does not depend on which thread read what.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "read/snapshot.h"

namespace ncw {

// Threads for reading files: twice the cores, at least 16 (on a cold cache a thread mostly waits for the disk, and
// more reads in flight keep the device busy), at most 32.
unsigned default_read_threads() noexcept;

// The ring records read per file for the history before the signature window (kHistoryRecords, snapshot.h) when
// `files` files are analysed together: kHistoryRecords up to 1,024 files; past that the analysis shares 2,097,152
// (kHistoryRecords x 1,024: its memory, its reading and the mismatch scan stay those of 1,024 files), at least
// kMinHistoryRecords per file. 16,384 files: 128 each.
inline constexpr uint64_t kHistoryBudget = kHistoryRecords * 1024;
inline constexpr uint64_t kMinHistoryRecords = 128;
uint64_t history_records_for(size_t files) noexcept;

// snapshot_path() of each path, in the paths' order, with history_records_for(the files read); a file named twice (the
// same after weakly_canonical: a folder and a file in it) is read once, at its first place. threads 0 =
// default_read_threads(); 1 reads on the caller's thread. A file that cannot be read is a snapshot with ok false and
// its error, as from snapshot_path().
std::vector<FileSnapshot> snapshot_paths(const std::vector<std::string>& paths, bool with_p2p,
                                         unsigned threads = 0) noexcept;

}  // namespace ncw

// One rank file as read at one moment: what the offline analysis, the watchdog and the live collector analyse. The
// live collector builds the same from a rank's Hello and Digests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "read/rank_file.h"
#include "read/rank_state.h"

namespace ncw {

// One file as read: the error, or the header and comm slots at the time of the snapshot.
struct FileSnapshot {
    std::string path;
    bool ok = false;
    std::string error;                  // why nothing could be read (when !ok)
    std::vector<std::string> warnings;  // damage that still left something readable (truncation)
    HeaderInfo header;
    std::vector<CommInfo> comms;

    // Point-to-point counts per communicator and peer, from the ring (only when asked for: p2p_read).
    struct P2pTable {
        uint64_t comm_id = 0;
        std::vector<verdict::PeerP2p> peers;  // timestamps on this file's clock
    };
    bool p2p_read = false;
    bool p2p_wrapped = false;  // the ring had dropped older records
    // When the counts stood at least (this file's clock; 0: not known): a rank file's heartbeat before its ring was
    // read, a State frame's sending. A peer's counts older than a rank's completion cannot contradict it.
    uint64_t p2p_as_of_ns = 0;
    std::vector<P2pTable> p2p;
};

// Offline, the signature window (the last 64 collectives per communicator) may have rolled past a mismatch that NCCL
// completed silently while the job went on: the newest ring records give the collectives before the window (and the
// GPU times), so the mismatch scan sees them too. This many per file, bounded so that 1,024 files stay a few tens of
// MB; a bigger analysis shares a budget of them (read/snapshot_batch.h).
inline constexpr uint64_t kHistoryRecords = 2048;

// with_p2p: also read the ring for the send/recv counts per peer (only the files whose comms did p2p pay for it), the
// collectives before the signature window and the in-collective GPU times (CommInfo::gpu_spans, read/gpu_spans.h),
// both from the newest history_records ring records. Unopened: its open() error; changed size since open or shrank
// under the read: !ok, error = file.read_error() (the RankFile stays failed: reopen it to read the file as it is now).
FileSnapshot snapshot(const RankFile& file, bool with_p2p = false,
                      uint64_t history_records = kHistoryRecords) noexcept;  // unopened: its open() error
FileSnapshot snapshot_path(const std::string& path, bool with_p2p = false,
                           uint64_t history_records = kHistoryRecords) noexcept;

// The point-to-point counts of s.comms' communicators that carried any, from the file's ring (s.p2p_read, p2p_wrapped,
// p2p): what snapshot(file, true) adds; the live digest client sends the same (protocol 1.6 State).
void read_p2p(const RankFile& file, FileSnapshot& s);

// The latest moment the file shows the process alive: its heartbeat, or its last activity if later or no heartbeat.
uint64_t last_seen(const FileSnapshot& f) noexcept;

}  // namespace ncw

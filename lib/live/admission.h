// What the live collector lets in, so that its cost follows what is real (issue 28, point 4): the rules as pure
// functions, applied by the live collector (live_server_impl.h) at its call sites.
//   - A communicator claiming more ranks than one job may hold is set aside: the claim would size the engine's
//     per-rank tables (missing ranks, evidence lines) by a number no rank proved.
//   - A rank's state is estimated in bytes, so that a memory budget (the collector inside rank 0) can refuse more.
//   - Room for a new rank or job is made by forgetting a job that shows no progress, never one whose completed
//     counts grew lately: held connections and made-up jobs cannot lock out a job that is training. Counts are a
//     claim too (issue 45): a proven rank (a token, or the pid of a loopback peer) may take the room of a training
//     job none of whose ranks proved who they are.
//   - Connections without a Hello are bounded, in all and per peer address: past the bound the oldest of them goes,
//     so that connections held open cannot keep real ranks out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "read/snapshot.h"

namespace ncw::live {

// Removes the communicators that claim more than max_ranks ranks (or a rank outside them); returns how many.
size_t set_aside_oversized(std::vector<CommInfo>& comms, size_t max_ranks);

// Whether `now` shows progress over `before`: a communicator (by id) completed more operations than it had.
bool shows_progress(const std::vector<CommInfo>& before, const std::vector<CommInfo>& now);

// An estimate of the bytes a rank's snapshot holds (its strings, communicators, signatures, GPU times, p2p tables,
// Python stacks), plus a fixed share for its bookkeeping.
size_t snapshot_bytes(const FileSnapshot& s);

// A job as make_room weighs it.
struct JobWeight {
    std::string key;
    bool connected = false;      // a rank's connection is open
    bool finished = false;       // every rank said Bye
    bool progressing = false;    // its completed counts grew within the protection window
    uint64_t last_frame_ns = 0;  // the latest frame of any of its ranks
    bool proven = false;         // every connected rank of it proved who it is (live_server_impl.h Conn::proven)
};
// The job to forget for room, or -1: a finished idle one first, then the idle one heard from least recently, then a
// connected one without progress, then an idle one that was training, then, for a `proven` newcomer only, a connected
// one that is training but not proven; the least recently heard first in each. Never a proven connected job that is
// training, never index `keep`.
int pick_victim(const std::vector<JobWeight>& jobs, int keep, bool proven = false);

// The connections without a Hello, oldest first (conn ids grow), in all and per peer address.
class Unproven {
public:
    void add(uint64_t id, const std::string& ip);
    void remove(uint64_t id);
    size_t size() const { return ids_.size(); }
    size_t of_ip(const std::string& ip) const;
    // The connection to close before admitting one more from `ip`, or 0: the oldest of `ip`'s when it holds
    // per_ip, else the oldest of all when they are `total`.
    uint64_t victim(const std::string& ip, size_t total, size_t per_ip) const;

private:
    std::map<uint64_t, std::string> ids_;              // id -> ip
    std::map<std::string, std::set<uint64_t>> by_ip_;  // ip -> ids
};

}  // namespace ncw::live

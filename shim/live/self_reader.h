// What the live digest client reads of its own process: a snapshot of this process's rank file (through RankFile when
// the file is on disk, straight from the mapping when the shim fell back to anonymous memory), plus the communicators
// that hold no slot of the file's comm table (more than max_comms alive at once, comm_slots.h): their progress blocks
// live in our memory only, so the digest is the one way the live collector sees them.
#pragma once

#include <string>
#include <vector>

#include "read/rank_file.h"
#include "read/snapshot.h"

namespace ncw {

struct RankFileWriter;
class SlotTable;
struct PassCounter;

namespace live_client {

class SelfReader {
public:
    // slots: the process's slot table, for the communicators without a comm slot (nullptr: the file's table only).
    // pass: counts the reads of their runtimes, which a destroyed communicator's reuse waits for (comm_pool.h).
    explicit SelfReader(const RankFileWriter& w, const SlotTable* slots = nullptr, PassCounter* pass = nullptr);
    HeaderInfo header() const;
    // The file's comm slots, then the communicators without one (slot kNoCommSlot, ordered by id), each with its
    // newest in-collective GPU times.
    std::vector<CommInfo> comms() const;
    // The point-to-point counts per peer of those of `comms` that carried any, from the ring (read/snapshot.h).
    void p2p(FileSnapshot& s) const;
    const std::string& error() const { return error_; }

private:
    RankFile file_;
    const SlotTable* slots_ = nullptr;
    PassCounter* pass_ = nullptr;
    std::string error_;
};

}  // namespace live_client
}  // namespace ncw

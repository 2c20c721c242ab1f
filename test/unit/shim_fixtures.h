// What the shim's unit tests share (test/unit/shim/): a process identity, a communicator in a rank file's comm slot,
// and the operations the wrappers would describe.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "ncclwatch/format.h"
#include "shim/record/comm_registry.h"
#include "shim/record/process_identity.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"

namespace shim_fixtures {

using namespace ncw;

inline ProcessIdentity test_identity(const std::string& job = "ringtest") {
    ProcessIdentity id;
    id.global_rank = 0;
    id.host = "testhost";
    id.pid = getpid();
    id.job_id = job;
    return id;
}

// A communicator in comm slot `slot` of the file, as the runtime makes one at its init (active, with per-peer p2p
// counters). Leaked, as in the shim.
inline CommRuntime* make_comm(RankFileWriter& f, uint64_t comm_id, uint16_t slot = 0, int rank = 0, int nranks = 2) {
    auto* cr = new CommRuntime;
    cr->comm_id = comm_id;
    cr->rank = rank;
    cr->nranks = nranks;
    cr->slot = &f.comms[slot];
    cr->slot_index = slot;
    disk::CommSlot& s = f.comms[slot];
    s.comm_id = comm_id;
    s.rank = rank;
    s.nranks = nranks;
    s.state.store(uint32_t(disk::CommState::Active));
    cr->send_seq = new std::atomic<uint64_t>[nranks]();
    cr->recv_seq = new std::atomic<uint64_t>[nranks]();
    cr->peer_slots = uint32_t(nranks);
    f.hdr->num_comms.store(std::max(f.hdr->num_comms.load(), uint32_t(slot) + 1));
    return cr;
}

// A collective of `count` elements (float; sum where it reduces) on `stream`.
inline OpDesc coll(disk::OpType op, size_t count, cudaStream_t stream = nullptr, int root = -1) {
    return OpDesc{op, nullptr, nullptr, count, 7, disk::has_redop(op) ? 0 : -1, root, nullptr, stream};
}
// A send or receive of 16 elements with `peer`.
inline OpDesc p2p(disk::OpType op, int peer, cudaStream_t stream = nullptr) {
    return OpDesc{op, nullptr, nullptr, 16, 7, -1, peer, nullptr, stream};
}

}  // namespace shim_fixtures

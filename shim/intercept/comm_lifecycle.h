// A communicator's life as the init, split and destroy hooks see it: begun before the real init call (so an init
// that never returns is on record, with the rank and the communicator it was joining), finished after it, its
// identity (rank, size, device, PCI bus id, GPU UUID) filled once NCCL can tell it, and a communicator made before the
// shim could see it adopted at its first operation.
#pragma once

#include <nccl.h>

#include "shim/record/runtime.h"

namespace ncw {

struct CommInitInfo {
    uint64_t comm_id = 0;
    int rank = -1;
    int nranks = 0;
    uint64_t parent_id = 0;
    int color = -1;
    int key = -1;
    const ncclConfig_t* config = nullptr;
    disk::OpType event = disk::OpType::CommInit;
};
CommRuntime* begin_comm(Runtime& rt, const CommInitInfo& info);
void finish_comm(Runtime& rt, CommRuntime* cr, ncclComm_t comm, ncclResult_t result);

// For a communicator created before the shim could see it (the slow path, once per communicator).
CommRuntime* adopt_unknown_comm(Runtime& rt, ncclComm_t comm);

// Fills what a nonblocking or grouped init could not tell at once (rank, size, device). Called on the host's
// threads only (outermost ncclGroupEnd, ncclCommGetAsyncError reporting success).
void refresh_comm_identity(Runtime& rt, CommRuntime& cr);
void refresh_pending_identities(Runtime& rt);

}  // namespace ncw

// Writing one record into its ring slot when several threads write the ring. The record's stamp (format.h) is a
// seqlock, and a seqlock allows one writer at a time: but a writer can be delayed (preempted) between taking its
// ticket and finishing its record while the other threads write a whole lap of the ring, and the ticket of the next
// lap then names the same slot. Without care the late writer's stores land in the newer record (which readers then
// take as whole: a mix of two operations) and its stamp moves the slot back to the older ticket.
//
// So the record is made on the stack, and copied into its slot only after a check that its writer was not overtaken
// (the slot's stamp not past the writer's own, the ticket of the slot's next lap not handed out; else the record,
// older than anything the ring keeps, is dropped); the stamp is then published by a CAS. On x86-64 with glibc's
// restartable sequences (rseq) the check, the claim (a plain store then), the copy and the publication are one
// restartable sequence: a writer preempted inside it starts again from the check, so no store of a writer that was
// overtaken while off the CPU ever lands. Elsewhere (or on a thread glibc did not register) the slot is claimed by a
// CAS that only moves its stamp forward and the copy is plain: a writer preempted inside it may store into a newer
// record, then finds its publication failed and marks the slot unwritten (stamp 0: read as torn, never as a mix of
// two); a newer writer still copying then finds its own publication failed and writes its record again.
//
// Lock-free: no waiting for another writer, no allocation, no syscall.
#pragma once

#include <cstdint>

#include "ncclwatch/format.h"
#include "shim/record/rank_file_writer.h"

namespace ncw {

// Writes `staged` (everything but its stamp) and, when nframes > 0, `frames` (f.bt_depth of them) into the slot of
// `ticket` and publishes them (stamp 2*ticket+2). False: the record was dropped, the ring having moved past it.
bool publish_record(const RankFileWriter& f, uint64_t ticket, const disk::OpRecord& staged, const uint64_t* frames,
                    uint32_t nframes);

// Whether publish_record runs as a restartable sequence in this process (for the logs and the tests).
bool ring_publish_restartable() noexcept;

}  // namespace ncw

// Writing records into the ring without a locked instruction per record. Tickets are handed out in chunks
// (disk::kRingChunk, format.h) to one thread at a time: one fetch_add on the header's write_ticket per chunk, and the
// chunk's slots are then written by that thread alone, so each record is a single-writer seqlock: its stamp odd, the
// fields in plain stores, its stamp even in one release store.
//
// A chunk is used only while the ring's head has not gone half a lap past it: its slots are handed out again a whole
// lap on, so a thread that comes back to a chunk that old (it issued nothing while the others wrote half the ring)
// leaves the rest of it and takes a new one. What a claimed slot holds until its thread writes it, or for good if
// its thread wrote no more, is the previous lap's record or nothing: readers see a stamp older than its ticket.
//
// The one case not covered: a writer preempted between that check and its last store for as long as the other
// threads take to write half the ring (8,192 records by default), which then resumes at the very moment the slot's
// next owner writes it. The two writers' stores could then mix under the later stamp. Both would have to be inside
// the same few dozen instructions; the earlier design's locked claim and publication (three locked instructions per
// record) cost more than that risk is worth.
//
// Lock-free: no waiting for another writer, no allocation, no syscall.
#pragma once

#include <atomic>
#include <cstdint>

#include "ncclwatch/format.h"
#include "shim/record/rank_file_writer.h"

namespace ncw {

// A thread's current chunk of one ring (thread-local: ThreadState::ring).
struct RingCursor {
    const disk::OpRecord* ring = nullptr;  // the ring the chunk is in (a forked child, a new runtime: another)
    uint64_t next = 0;                     // the next ticket to write
    uint64_t end = 0;                      // one past the chunk's last
};

// The next ticket of this thread's chunk, taking a new chunk when the last is used up or too old (above).
inline uint64_t take_ticket(const RankFileWriter& f, RingCursor& c) {
    const uint64_t half_lap = (uint64_t(f.ring_mask) + 1) / 2;
    if (__builtin_expect(c.next == c.end || c.ring != f.ring ||
                             f.hdr->write_ticket.load(std::memory_order_relaxed) > c.next + half_lap,
                         0)) {
        c.ring = f.ring;
        c.next = f.hdr->write_ticket.fetch_add(disk::kRingChunk, std::memory_order_relaxed);
        c.end = c.next + disk::kRingChunk;
    }
    return c.next++;
}

// The slot of `ticket`, marked as being written (stamp 2*ticket+1); every field but the stamp is to be stored, then
// close_record publishes it.
inline disk::OpRecord& open_record(const RankFileWriter& f, uint64_t ticket) {
    disk::OpRecord& rec = f.ring[ticket & f.ring_mask];
    rec.stamp.store(2 * ticket + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);  // the mark before the fields (a compiler barrier on x86)
    return rec;
}
inline void close_record(disk::OpRecord& rec, uint64_t ticket) {
    rec.stamp.store(2 * ticket + 2, std::memory_order_release);
}
// The call stack of `ticket`'s record (f.bt_depth frames), between open_record and close_record.
inline uint64_t* record_frames(const RankFileWriter& f, uint64_t ticket) {
    return f.frames ? f.frames + (ticket & f.ring_mask) * f.bt_depth : nullptr;
}

}  // namespace ncw

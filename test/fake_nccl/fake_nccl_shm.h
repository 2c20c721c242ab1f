// The POSIX shared-memory segment that the ranks of one fake communicator share. One segment per unique id: every
// counter in it is monotonic and written by one rank only, so the ranks need no locks, only atomics.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ncw::fake {

inline constexpr int kMaxRanks = 256;
inline constexpr uint32_t kSegmentMagic = 0x464b4e31;  // "FKN1": set last by the creator, once the segment is usable

// The per-rank part. Only rank i writes ranks[i].
struct alignas(64) RankSlot {
    std::atomic<uint64_t> arrived;    // the sequence number of the last collective this rank has posted
    std::atomic<uint32_t> joined;     // 1 once the rank has attached (init is collective: all wait for all)
    std::atomic<int32_t> xchg_color;  // split: this rank's color and key for round xchg_posted
    std::atomic<int32_t> xchg_key;
    std::atomic<uint64_t> xchg_posted;  // split/shrink rounds whose data this rank has published
    std::atomic<uint64_t> xchg_read;    // split rounds whose data this rank has finished reading
    std::atomic<int32_t> pid;           // the rank's process (set at attach): a peer gone without leaving is an error
    std::atomic<uint32_t> left;         // 1 once the rank destroyed or aborted its communicator
    // FNV-1a of the rank's NCCL_ALGO at attach (0: unset). NCCL picks each op's algorithm on each rank from its own
    // setting: ranks that disagree never complete a collective (the fake's model of that hang).
    std::atomic<uint64_t> algo;
};

// Point-to-point counters of one ordered pair. pairs[a][b].sends is written by a only, .recvs by b only.
// The bytes of each posted op, at [seq % 2]: as NCCL, a send moves what its receive takes, so the pair completes only
// where they agree; the larger side hangs (its peer is done with the pair). Two slots suffice: a side that waits in
// its n-th op has posted nothing after it, so its peer cannot get past its own n+1-th.
struct PairCounters {
    std::atomic<uint64_t> sends;  // sends posted by a to b
    std::atomic<uint64_t> recvs;  // receives posted by b from a
    std::atomic<uint64_t> send_bytes[2];
    std::atomic<uint64_t> recv_bytes[2];
};

struct Segment {
    std::atomic<uint32_t> magic;
    int32_t nranks;
    std::atomic<uint32_t> attached;  // ranks attached now: the last one to leave unlinks (if the join failed)
    std::atomic<uint32_t> aborted;   // some rank called ncclCommAbort: blocked peers fail promptly
    RankSlot ranks[kMaxRanks];
    PairCounters pairs[kMaxRanks][kMaxRanks];  // [sender][receiver]
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "cross-process atomics must be lock-free");

// FNV-1a over the unique id: the segment name and the ids of child communicators derive from it.
uint64_t hash_id(const ncclUniqueId& id);

// "/fakenccl-[<tag>-]<16 hex>", where tag is FAKE_NCCL_SHM_TAG (set by fake_launch so that it can remove what a
// killed job left behind), reduced to [A-Za-z0-9_].
std::string segment_name(const ncclUniqueId& id);

// Opens the segment of `name`, creating and initialising it if this caller is first (O_EXCL decides who is). Waits
// at most `timeout_sec` for a concurrent creator to finish. On failure returns nullptr and sets `error`.
Segment* open_segment(const std::string& name, int nranks, double timeout_sec, std::string& error);

// Unmaps a segment (does not unlink it).
void unmap_segment(Segment* seg);

// Best-effort shm_unlink (ENOENT is fine: every rank unlinks once the join completes).
void unlink_segment(const std::string& name);

}  // namespace ncw::fake

// The test NCCL's ncclCommSplit and ncclCommShrink: an exchange over the parent's segment, then the child's init.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fake_nccl_comm.h"
#include "fake_nccl_shm.h"
#include "fake_nccl_wait.h"

namespace ncw::fake {

using namespace detail;

namespace {

// Deterministic child id: every member computes the same one from what they all know.
ncclUniqueId derive_id(const ncclUniqueId& parent, uint64_t round, uint64_t salt) {
    uint64_t x = hash_id(parent) ^ (round * 0x9e3779b97f4a7c15ull) ^ (salt * 0xc2b2ae3d27d4eb4full);
    ncclUniqueId id{};
    for (size_t off = 0; off < sizeof id.internal; off += 8) {
        // splitmix64
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        std::memcpy(id.internal + off, &z, 8);
    }
    return id;
}

bool config_nonblocking(const ncclConfig_t* config, bool fallback) {
    if (config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT) return fallback;
    return config->blocking == 0;
}

// Creates the child of a split/shrink and waits for its members (blocking, also inside a group).
ncclResult_t create_child(const Comm* parent, const ncclUniqueId& id, int nranks, int rank, const ncclConfig_t* config,
                          ncclComm_t* newcomm) {
    Comm* child = nullptr;
    ncclResult_t r =
        create_comm(id, nranks, rank, parent->device, config_nonblocking(config, parent->nonblocking), &child);
    if (r != ncclSuccess) return r;
    Op join{OpKind::Join, child, "CommInit(child)", -1, 0};
    post(join);
    r = wait_op(join, deadline_from_now());
    *newcomm = to_handle(child);
    return r;
}

}  // namespace

ncclResult_t split(Comm* parent, int color, int key, const ncclConfig_t* config, ncclComm_t* newcomm) {
    *newcomm = nullptr;
    Segment* s = parent->seg;
    RankSlot& me = s->ranks[parent->rank];
    uint64_t round = ++parent->xchg_seq;
    me.xchg_color.store(color, std::memory_order_relaxed);
    me.xchg_key.store(key, std::memory_order_relaxed);
    me.xchg_posted.store(round, std::memory_order_release);

    std::vector<int> everyone = all_ranks(parent);
    auto posted = [s](int i) { return s->ranks[i].xchg_posted.load(std::memory_order_acquire); };
    auto read = [s](int i) { return s->ranks[i].xchg_read.load(std::memory_order_acquire); };
    auto all_at = [&](auto counter) {
        return [&, counter] {
            for (int i : everyone)
                if (counter(i) < round) return false;
            return true;
        };
    };
    Clock::time_point deadline = deadline_from_now();
    ncclResult_t r = wait_until(parent, "CommSplit", deadline, all_at(posted),
                                [&] { return lagging_ranks(everyone, round, posted); });
    if (r != ncclSuccess) return r;

    // Members of our color, ordered by (key, parent rank) as NCCL does.
    std::vector<std::pair<int, int>> members;
    for (int i : everyone) {
        if (s->ranks[i].xchg_color.load(std::memory_order_relaxed) == color) {
            members.emplace_back(s->ranks[i].xchg_key.load(std::memory_order_relaxed), i);
        }
    }
    // A second barrier: nobody may publish the next round's color/key before everyone has read this round's.
    me.xchg_read.store(round, std::memory_order_release);
    r = wait_until(parent, "CommSplit", deadline, all_at(read), [&] { return lagging_ranks(everyone, round, read); });
    if (r != ncclSuccess) return r;

    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    while (members[new_rank].second != parent->rank) ++new_rank;
    ncclUniqueId child = derive_id(parent->id, round, static_cast<uint32_t>(color));
    return create_child(parent, child, static_cast<int>(members.size()), new_rank, config, newcomm);
}

ncclResult_t shrink(Comm* parent, const int* exclude, int exclude_count, const ncclConfig_t* config,
                    ncclComm_t* newcomm) {
    *newcomm = nullptr;
    std::vector<bool> excluded(parent->nranks, false);
    for (int i = 0; i < exclude_count; ++i) {
        if (exclude[i] < 0 || exclude[i] >= parent->nranks) {
            return report(ncclInvalidArgument,
                          "CommShrink: excluded rank " + std::to_string(exclude[i]) + " out of range");
        }
        excluded[exclude[i]] = true;
    }
    if (excluded[parent->rank]) return report(ncclInvalidArgument, "CommShrink: called by an excluded rank");
    std::vector<int> survivors;
    int new_rank = 0;
    for (int i = 0; i < parent->nranks; ++i) {
        if (excluded[i]) continue;
        if (i == parent->rank) new_rank = static_cast<int>(survivors.size());
        survivors.push_back(i);
    }

    Segment* s = parent->seg;
    uint64_t round = ++parent->xchg_seq;
    s->ranks[parent->rank].xchg_posted.store(round, std::memory_order_release);
    auto posted = [s](int i) { return s->ranks[i].xchg_posted.load(std::memory_order_acquire); };
    // The parent may be in error, revoked or aborted by the failed peer: only a local abort stops the exchange.
    ncclResult_t r = wait_until(
        parent, "CommShrink", deadline_from_now(),
        [&] {
            for (int i : survivors)
                if (posted(i) < round) return false;
            return true;
        },
        [&] { return lagging_ranks(survivors, round, posted); }, /*recovery=*/true);
    if (r != ncclSuccess) return r;
    ncclUniqueId child = derive_id(parent->id, round, 0x5348524b00000000ull);  // "SHRK": apart from split colors
    return create_child(parent, child, static_cast<int>(survivors.size()), new_rank, config, newcomm);
}

}  // namespace ncw::fake

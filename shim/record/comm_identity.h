// Communicator identities that every rank computes alike without talking to the others: a hash of the
// ncclUniqueId for a root communicator; for a split or shrink child, a hash of (parent id, the parent's split
// counter, color), since every member calls split on the parent in the same order.
#pragma once

#include <nccl.h>

#include <cstdint>

namespace ncw {

uint64_t root_comm_id(const ncclUniqueId& id);
uint64_t child_comm_id(uint64_t parent_id, uint64_t split_counter, int64_t color);
// ncclCommShrink: the excluded ranks play the part of the color.
uint64_t shrink_comm_id(uint64_t parent_id, uint64_t split_counter, const int* excluded, int n_excluded);

}  // namespace ncw

#include "shim/record/comm_identity.h"

#include "ncclwatch/hash.h"

namespace ncw {

uint64_t root_comm_id(const ncclUniqueId& id) { return fnv1a64(id.internal, sizeof(id.internal)); }

uint64_t child_comm_id(uint64_t parent_id, uint64_t split_counter, int64_t color) {
    uint64_t parts[3] = {parent_id, split_counter, uint64_t(color)};
    return fnv1a64(parts, sizeof(parts));
}

uint64_t shrink_comm_id(uint64_t parent_id, uint64_t split_counter, const int* excluded, int n_excluded) {
    uint64_t h = excluded && n_excluded > 0 ? fnv1a64(excluded, sizeof(int) * size_t(n_excluded)) : 0;
    return child_comm_id(parent_id, split_counter, int64_t(h ^ 0x5348524Bull));  // "SHRK": apart from any color
}

}  // namespace ncw

// Matching signatures (verdict_mismatch.cpp): the fields two ranks' ops must agree on, and the signature of a seq as
// most ranks recorded it. find_mismatches itself is in verdict.h; the drift and tie-break rules match by Key too.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

// The fields that take part in matching. root only matters for rooted ops and redop only for reducing ops: NCCL
// ignores the other (PyTorch passes whatever it has), so a difference there is not a mismatch.
struct Key {
    uint8_t op;
    uint8_t dtype;
    uint64_t count;
    int32_t root;
    int32_t redop;
    auto operator<=>(const Key&) const = default;
};
Key key_of(const OpSig& s);
// The signature of `seq` as most of `ranks` recorded it (tie: lowest rank); falls back to any visible rank's copy.
OpSig majority_sig(const CommView& v, const std::vector<size_t>& order, const std::vector<int>& ranks, uint64_t seq);

}  // namespace ncw::verdict

// What the two straggler rules share (straggler.cpp, straggler_gpu.cpp): a quantile, the words of a duration, and
// the verdict's skeleton.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict::detail {

// The q-quantile of v, nearest rank (0 for none).
inline double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
    return v[i];
}

inline std::string ms(double s) { return fmt::format("{:.1f} ms", s * 1e3); }

// A STRAGGLER naming rank r of the communicator at collective `seq` (the newest judged), with that op's signature
// where r's window still holds it; the rule adds the words.
inline Verdict straggler_at(const CommView& view, const RankCommState& r, uint64_t seq) {
    Verdict v;
    v.kind = Kind::Straggler;
    v.comm_id = view.comm_id;
    v.seq = seq;
    v.culprits = {r.comm_rank};
    for (const auto& s : r.recent)
        if (s.seq == seq) v.op = s;
    return v;
}

}  // namespace ncw::verdict::detail

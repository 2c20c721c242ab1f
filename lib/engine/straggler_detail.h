// What the two straggler rules share (straggler.cpp, straggler_gpu.cpp): a quantile and the words of a duration.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ncw::verdict::detail {

// The q-quantile of v, nearest rank (0 for none).
inline double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
    return v[i];
}

inline std::string ms(double s) { return fmt::format("{:.1f} ms", s * 1e3); }

}  // namespace ncw::verdict::detail

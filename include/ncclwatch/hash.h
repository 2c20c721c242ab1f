// 64-bit FNV-1a: how communicator identities and boot ids are hashed, by the shim and the readers alike.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncw {

inline constexpr uint64_t kFnvOffset = 14695981039346656037ull;

inline uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = kFnvOffset) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t h = seed;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

template <typename T>
inline uint64_t fnv1a64_value(const T& v, uint64_t seed = kFnvOffset) {
    return fnv1a64(&v, sizeof(v), seed);
}

}  // namespace ncw

// Loads out of a rank-file mapping that another process (or thread) writes while we read: every read is an atomic
// load, so the copy is free of data races. Internal to the reader (rank_file*.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ncclwatch/format.h"

namespace ncw::mapped {

inline const disk::FileHeader* header_of(const unsigned char* base) {
    return reinterpret_cast<const disk::FileHeader*>(base);
}

template <class T>
T ld(const T& field) noexcept {
    return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

// Loads inside a seqlock/stamp window are acquire: they keep the closing re-read of the stamp after them without a
// standalone fence (which ThreadSanitizer does not model), and cost nothing extra on x86.
template <class T>
T lda(const T& field) noexcept {
    return __atomic_load_n(&field, __ATOMIC_ACQUIRE);
}

template <class T>
T ld(const std::atomic<T>& field, std::memory_order mo = std::memory_order_relaxed) noexcept {
    return field.load(mo);
}

// A fixed-size char field, up to its first NUL. Byte-wise atomic loads: the field may be written while we read it.
template <size_t N>
std::string ld_str(const char (&field)[N]) {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
        const char c = __atomic_load_n(&field[i], __ATOMIC_RELAXED);
        if (c == '\0') break;
        out.push_back(c);
    }
    return out;
}

// n bytes of memory that our own threads write while we copy (the shim's anonymous mapping, its in-memory comm slots):
// atomic loads, 8 bytes at a time where both ends are aligned, so the copy is free of data races.
inline void copy_live(void* dst, const void* src, size_t n) noexcept {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    size_t i = 0;
    if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 7) == 0)
        for (; i + 8 <= n; i += 8) {
            const uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t*>(s + i), __ATOMIC_ACQUIRE);
            __builtin_memcpy(d + i, &v, 8);
        }
    for (; i < n; ++i) d[i] = __atomic_load_n(s + i, __ATOMIC_ACQUIRE);
}

// One field of a format_fields.h list, copied into the reader's struct. Acquire throughout: the generated copies
// serve inside seqlock/stamp windows (signatures, records) as well as for the header and comm slots, whose
// publishing fields (num_comms, state) need acquire anyway; on x86 it is the same instruction as relaxed.
template <class T>
void load(T& dst, const T& src) noexcept {
    dst = lda(src);
}
template <class T>
void load(T& dst, const std::atomic<T>& src) noexcept {
    dst = src.load(std::memory_order_acquire);
}
template <size_t N>
void load(std::string& dst, const char (&src)[N]) {
    dst = ld_str(src);
}
// A GPU UUID (format 1.6): as nvidia-smi and dcgm-exporter write it, "GPU-" and the 16 bytes in groups of 4-2-2-2-6;
// all zero (not known, or a file before 1.6) reads as "".
inline void load(std::string& dst, const uint8_t (&src)[16]) {
    uint8_t b[16];
    bool any = false;
    for (size_t i = 0; i < 16; ++i) any |= (b[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED)) != 0;
    dst.clear();
    if (!any) return;
    static const char* const kHex = "0123456789abcdef";
    dst = "GPU-";
    for (size_t i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) dst.push_back('-');
        dst.push_back(kHex[b[i] >> 4]);
        dst.push_back(kHex[b[i] & 15]);
    }
}

}  // namespace ncw::mapped

// X(TYPE, NAME, ...) -> out.NAME = *in.NAME; `out` and `in` are in scope where the list is expanded.
#define NCW_LOAD_FIELD(type, name, ...) ::ncw::mapped::load(out.name, in->name);

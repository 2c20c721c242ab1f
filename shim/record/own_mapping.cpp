// The rank file's own mapping, rescued from a cut file (see own_mapping.h).
#include "shim/record/own_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

namespace ncw {
namespace {

std::atomic<uintptr_t> g_base{0};
std::atomic<uintptr_t> g_end{0};
std::atomic<uintptr_t> g_page{4096};  // read once at own_mapping_set: sysconf is not async-signal-safe
// The lowest address replaced by anonymous memory so far (g_end: none). Lowered by each rescue, never raised: a page
// below it is the file's, a page at or above it ours alone.
std::atomic<uintptr_t> g_anon_from{0};

}  // namespace

void own_mapping_set(void* base, size_t size) noexcept {
    const auto b = reinterpret_cast<uintptr_t>(base);
    g_page.store(uintptr_t(sysconf(_SC_PAGESIZE)), std::memory_order_relaxed);
    g_anon_from.store(b + size, std::memory_order_relaxed);
    g_end.store(b + size, std::memory_order_relaxed);
    g_base.store(b, std::memory_order_release);
}

bool own_mapping_rescue(const void* addr) noexcept {
    const uintptr_t base = g_base.load(std::memory_order_acquire);
    const auto a = reinterpret_cast<uintptr_t>(addr);
    if (!base || a < base || a >= g_end.load(std::memory_order_relaxed)) return false;
    const uintptr_t page = g_page.load(std::memory_order_relaxed);
    const uintptr_t from = a & ~(page - 1);
    uintptr_t upto = g_anon_from.load(std::memory_order_acquire);
    // Two threads faulting at once: each replaces only pages not yet replaced (the range below the other's), so that
    // nothing written to anonymous memory since is zeroed again.
    while (from < upto) {
        if (g_anon_from.compare_exchange_weak(upto, from, std::memory_order_acq_rel)) {
            void* p = mmap(reinterpret_cast<void*>(from), upto - from, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            return p != MAP_FAILED;
        }
    }
    return true;  // another thread's rescue covers this page already
}

uint64_t own_mapping_cut_at() noexcept {
    const uintptr_t base = g_base.load(std::memory_order_acquire);
    const uintptr_t anon = g_anon_from.load(std::memory_order_acquire);
    return base && anon < g_end.load(std::memory_order_relaxed) ? uint64_t(anon - base) : 0;
}

}  // namespace ncw

// Python stacks into the rank file (see py_stacks.h).
#include "py_stacks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "clock.h"
#include "log.h"
#include "runtime.h"

namespace ncw {
namespace {

// Threads that issued NCCL calls: appended once each, never removed (a thread's pthread_t may be reused after it
// ends; the table is evidence, not identity). Full: the later threads are not noted.
constexpr int kMaxNcclThreads = 64;
struct NcclThreadSlot {
    std::atomic<uint64_t> ident{0};
    std::atomic<uint32_t> tid{0};
};
NcclThreadSlot g_threads[kMaxNcclThreads];
std::atomic<int> g_nthreads{0};

using IsInitializedFn = int (*)();
using InterpMainFn = void* (*)();
using DumpThreadsFn = const char* (*)(int fd, void* interp, void* current);
using VersionFn = const char* (*)();

struct PyApi {
    bool looked_up = false;
    IsInitializedFn is_initialized = nullptr;
    InterpMainFn interp_main = nullptr;
    DumpThreadsFn dump = nullptr;
    char version[16] = {};  // "3.13" of Py_GetVersion(), for the message where no dump is exported
};
PyApi g_api;                      // written under g_busy only
std::atomic<bool> g_busy{false};  // one capture at a time; another is skipped, never waited for
std::atomic<uint64_t> g_last_ns{0};
int g_memfd = -1;  // under g_busy: created once, reused

void look_up(PyApi& a) {
    a.looked_up = true;
    a.is_initialized = reinterpret_cast<IsInitializedFn>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    if (!a.is_initialized) return;
    a.interp_main = reinterpret_cast<InterpMainFn>(dlsym(RTLD_DEFAULT, "PyInterpreterState_Main"));
    a.dump = reinterpret_cast<DumpThreadsFn>(dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads"));
    if (!a.dump) a.dump = reinterpret_cast<DumpThreadsFn>(dlsym(RTLD_DEFAULT, "PyUnstable_DumpTracebackThreads"));
    if (auto v = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "Py_GetVersion"))) {
        // "3.13.1 (main, ...)": the major.minor part.
        const char* s = v();
        size_t n = 0, dots = 0;
        while (s && s[n] && n + 1 < sizeof a.version && (isdigit(uint8_t(s[n])) || (s[n] == '.' && ++dots < 2))) ++n;
        if (s) memcpy(a.version, s, n);
    }
}

// Publishes `len` bytes already in the region (or none) with the given status, under the seqlock.
struct RegionWriter {
    disk::FileHeader* h;
    char* region;
    uint32_t capacity;

    void begin() {
        h->py_stacks_seq.fetch_add(1, std::memory_order_relaxed);  // odd
        std::atomic_thread_fence(std::memory_order_release);
    }
    void end(uint32_t len, disk::PyStacksStatus status, disk::PyStacksReason reason) {
        h->py_stacks_len.store(len, std::memory_order_relaxed);
        h->py_stacks_mono_ns.store(now_mono_ns(), std::memory_order_relaxed);
        h->py_stacks_reason.store(uint32_t(reason), std::memory_order_relaxed);
        h->py_stacks_status.store(uint32_t(status), std::memory_order_relaxed);
        h->py_stacks_seq.fetch_add(1, std::memory_order_release);  // even
    }
    void text(const char* s, disk::PyStacksStatus status, disk::PyStacksReason reason) {
        begin();
        const uint32_t n = uint32_t(std::min<size_t>(strlen(s), capacity));
        memcpy(region, s, n);
        end(n, status, reason);
    }
};

bool write_all(int fd, const char* s, size_t n) {
    while (n) {
        const ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        s += w;
        n -= size_t(w);
    }
    return true;
}

struct BusyGuard {
    bool owned = false;
    BusyGuard() { owned = !g_busy.exchange(true, std::memory_order_acquire); }
    ~BusyGuard() {
        if (owned) g_busy.store(false, std::memory_order_release);
    }
};

}  // namespace

void py_note_nccl_thread(uint32_t tid) noexcept {
    const int i = g_nthreads.load(std::memory_order_relaxed);
    if (i >= kMaxNcclThreads) return;
    const int slot = g_nthreads.fetch_add(1, std::memory_order_relaxed);
    if (slot >= kMaxNcclThreads) return;
    g_threads[slot].tid.store(tid, std::memory_order_relaxed);
    g_threads[slot].ident.store(uint64_t(pthread_self()), std::memory_order_release);
}

uint64_t py_stacks_last_capture_ns() noexcept { return g_last_ns.load(std::memory_order_relaxed); }

disk::PyStacksStatus py_stacks_capture(Runtime& rt, disk::PyStacksReason reason) noexcept {
    using Status = disk::PyStacksStatus;
    disk::FileHeader* h = rt.file.hdr;
    if (!h || h->py_stacks_capacity == 0 || h->py_stacks_offset + h->py_stacks_capacity > rt.file.size)
        return Status::None;
    BusyGuard busy;
    if (!busy.owned) return Status(h->py_stacks_status.load(std::memory_order_relaxed));
    const uint64_t t0 = now_mono_ns();
    RegionWriter out{h, reinterpret_cast<char*>(rt.file.base + h->py_stacks_offset), h->py_stacks_capacity};
    try {
        if (!rt.cfg.py_stacks) {
            if (h->py_stacks_status.load() != uint32_t(Status::Disabled)) out.text("", Status::Disabled, reason);
            return Status::Disabled;
        }
        if (!g_api.looked_up) look_up(g_api);
        // No CPython here (or not running): nothing of it is called, and the region says so once.
        if (!g_api.is_initialized || g_api.is_initialized() != 1) {
            if (h->py_stacks_status.load() != uint32_t(Status::NotPython)) out.text("", Status::NotPython, reason);
            return Status::NotPython;
        }
        if (!g_api.dump || !g_api.interp_main) {
            char msg[128];
            snprintf(msg, sizeof msg, "Python stacks not available on CPython %s (no _Py_DumpTracebackThreads)",
                     g_api.version[0] ? g_api.version : "?");
            if (h->py_stacks_status.load() != uint32_t(Status::Unavailable)) {
                log().warn("{}", msg);
                out.text(msg, Status::Unavailable, reason);
            }
            return Status::Unavailable;
        }
        if (g_memfd < 0) g_memfd = int(syscall(SYS_memfd_create, "ncclwatch-py-stacks", 1u /* MFD_CLOEXEC */));
        if (g_memfd < 0) {
            NCW_LOG_ONCE(warn, "Python stacks: memfd_create failed ({}); not captured", strerror(errno));
            out.text("memfd_create failed", Status::Failed, reason);
            return Status::Failed;
        }
        if (ftruncate(g_memfd, 0) != 0 || lseek(g_memfd, 0, SEEK_SET) != 0) {
            out.text("memfd reset failed", Status::Failed, reason);
            return Status::Failed;
        }
        // Which Python threads issued NCCL calls, then faulthandler's text.
        const int n = std::min(g_nthreads.load(std::memory_order_relaxed), kMaxNcclThreads);
        for (int i = 0; i < n; ++i) {
            const uint64_t ident = g_threads[i].ident.load(std::memory_order_acquire);
            if (!ident) continue;
            char line[96];
            const int len = snprintf(line, sizeof line, "# ncclwatch nccl-thread 0x%016llx tid %u\n",
                                     (unsigned long long)ident, g_threads[i].tid.load(std::memory_order_relaxed));
            if (len > 0) write_all(g_memfd, line, size_t(len));
        }
        void* interp = g_api.interp_main();
        const char* err = interp ? g_api.dump(g_memfd, interp, nullptr) : "no main interpreter";
        if (err) write_all(g_memfd, err, strlen(err)), write_all(g_memfd, "\n", 1);
        out.begin();
        ssize_t got = 0;
        while (got < ssize_t(out.capacity)) {
            const ssize_t r = pread(g_memfd, out.region + got, out.capacity - size_t(got), got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += r;
        }
        out.end(uint32_t(got), err ? Status::Failed : Status::Captured, reason);
        g_last_ns.store(now_mono_ns() - t0, std::memory_order_relaxed);
        return err ? Status::Failed : Status::Captured;
    } catch (...) {
        return Status::Failed;
    }
}

}  // namespace ncw

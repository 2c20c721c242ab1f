// Python stacks into the rank file (see py_stacks.h).
#include "shim/watch/py_stacks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/record/runtime.h"
#include "shim/watch/py_debug_offsets.h"

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
    // 3.13 and 3.14: the debug offsets at _PyRuntime, read at the first capture once CPython runs.
    uint64_t runtime = 0;
    pydbg::Types types;
    bool layout_read = false;
    pydbg::Layout layout;  // minor 0: none this walker follows
    char layout_why[160] = {};
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
    a.runtime = uint64_t(uintptr_t(dlsym(RTLD_DEFAULT, "_PyRuntime")));
    a.types.code = uint64_t(uintptr_t(dlsym(RTLD_DEFAULT, "PyCode_Type")));
    a.types.unicode = uint64_t(uintptr_t(dlsym(RTLD_DEFAULT, "PyUnicode_Type")));
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

// Publishes `len` bytes already in a region (or none) with the given status, under its seqlock: the Python stacks
// region (1.5) or the held one (1.8), each with its own fields.
struct RegionWriter {
    std::atomic<uint64_t>& seq;
    std::atomic<uint32_t>& len;
    std::atomic<uint64_t>& mono_ns;
    std::atomic<uint32_t>& reason;
    std::atomic<uint32_t>& status;
    char* region;
    uint32_t capacity;

    static RegionWriter newest(Runtime& rt) {
        disk::FileHeader* h = rt.file.hdr;
        return {h->py_stacks_seq,     h->py_stacks_len,    h->py_stacks_mono_ns,
                h->py_stacks_reason,  h->py_stacks_status, reinterpret_cast<char*>(rt.file.base + h->py_stacks_offset),
                h->py_stacks_capacity};
    }
    static RegionWriter held(Runtime& rt) {
        disk::FileHeader* h = rt.file.hdr;
        return {h->py_held_seq,     h->py_held_len,    h->py_held_mono_ns,
                h->py_held_reason,  h->py_held_status, reinterpret_cast<char*>(rt.file.base + h->py_held_offset),
                h->py_held_capacity};
    }

    void begin() {
        seq.fetch_add(1, std::memory_order_relaxed);  // odd
        std::atomic_thread_fence(std::memory_order_release);
    }
    // `at`: when the capture was taken (0: now).
    void end(uint32_t n, disk::PyStacksStatus st, disk::PyStacksReason why, uint64_t at = 0) {
        len.store(n, std::memory_order_relaxed);
        mono_ns.store(at ? at : now_mono_ns(), std::memory_order_relaxed);
        reason.store(uint32_t(why), std::memory_order_relaxed);
        status.store(uint32_t(st), std::memory_order_relaxed);
        seq.fetch_add(1, std::memory_order_release);  // even
    }
    void text(const char* s, disk::PyStacksStatus st, disk::PyStacksReason why) {
        begin();
        const uint32_t n = uint32_t(std::min<size_t>(strlen(s), capacity));
        memcpy(region, s, n);
        end(n, st, why);
    }
};

// The held capture (format 1.8): the first taken for a stall is copied once into its own region, which nothing
// replaces after, so that a report after the end still has the stack of the job's first stall once the newest capture
// is of a later moment (the exit, a later stall of this rank's own).
bool for_a_stall(disk::PyStacksReason r) {
    using R = disk::PyStacksReason;
    return r == R::Stall || r == R::DumpRequest || r == R::Suspected || r == R::InitHang;
}

void hold_first_stall_capture(Runtime& rt, const RegionWriter& newest, disk::PyStacksReason reason, uint32_t n) {
    disk::FileHeader* h = rt.file.hdr;
    if (!for_a_stall(reason) || h->py_held_capacity < n || h->py_held_seq.load() != 0 ||
        h->py_held_offset + h->py_held_capacity > rt.file.size)
        return;
    RegionWriter held = RegionWriter::held(rt);
    held.begin();
    memcpy(held.region, newest.region, n);
    held.end(n, disk::PyStacksStatus::Captured, reason, newest.mono_ns.load(std::memory_order_relaxed));
}

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

// The dump's text into the region. It fits: as it is. Too big (many threads, deep stacks): the shim's lines, then the
// threads that issued NCCL calls, then the others in CPython's order while whole ones fit, and a line saying so;
// CPython prints the main thread last, so a plain cut would lose the one that matters first.
size_t copy_out(int fd, char* region, size_t cap, const uint64_t* idents, int n_idents) {
    const off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0) return 0;
    if (size_t(size) <= cap) {
        size_t got = 0;
        while (got < size_t(size)) {
            const ssize_t r = pread(fd, region + got, size_t(size) - got, off_t(got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += size_t(r);
        }
        return got;
    }
    void* m = mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return 0;
    const char* t = static_cast<const char*>(m);
    const size_t n = size_t(size);
    // Section starts: the offsets of lines that begin with "Thread " or "Current thread ".
    constexpr int kMaxSections = 128;
    size_t starts[kMaxSections + 1];
    int ns = 0;
    for (size_t i = 0; i < n && ns < kMaxSections;) {
        if ((n - i > 7 && memcmp(t + i, "Thread ", 7) == 0) ||
            (n - i > 15 && memcmp(t + i, "Current thread ", 15) == 0))
            starts[ns++] = i;
        const void* nl = memchr(t + i, '\n', n - i);
        i = nl ? size_t(static_cast<const char*>(nl) - t) + 1 : n;
    }
    const size_t prefix = ns ? starts[0] : n;
    starts[ns] = n;
    size_t used = std::min(prefix, cap);
    memcpy(region, t, used);
    constexpr size_t reserve = 96;  // the closing line
    bool taken[kMaxSections] = {};
    auto take = [&](int k) {
        const size_t len = starts[k + 1] - starts[k];
        if (taken[k] || used + len + reserve > cap) return;
        memcpy(region + used, t + starts[k], len);
        used += len;
        taken[k] = true;
    };
    for (int k = 0; k < ns; ++k) {
        char id[24];
        const size_t line_end = std::min<size_t>(starts[k + 1], starts[k] + 64);
        for (int j = 0; j < n_idents; ++j) {
            snprintf(id, sizeof id, "0x%016llx", (unsigned long long)idents[j]);
            if (memmem(t + starts[k], line_end - starts[k], id, strlen(id))) take(k);
        }
    }
    for (int k = 0; k < ns; ++k) take(k);
    munmap(m, size_t(size));
    char note[96];
    const int len = snprintf(note, sizeof note, "# ncclwatch cut: %zu of %zu bytes, NCCL threads first\n", used, n);
    if (len > 0 && used + size_t(len) <= cap) {
        memcpy(region + used, note, size_t(len));
        used += size_t(len);
    }
    return used;
}

// CPython's routine reads other threads' frames without the GIL while they run: a thread that pushes or pops a frame
// (or starts or ends) under it can make it follow a stale pointer, and in the process itself that is a SIGSEGV of the
// training job (seen in bench/py_stacks_cost.py's churn). So it runs in a copy of the process: a raw clone (fork
// semantics, no atfork handlers, exit signal 0 so no SIGCHLD and no host's waitpid(-1) reaps it), which only calls the
// routine into the shared memfd and exits; a crash there costs the copy, never the job. The copy's default fatal
// signal dispositions (not the host's or faulthandler's handlers), no core file, an alarm of 2 s; we wait 2 s at most
// (polling, our thread only), then SIGKILL it. nullptr: the text is in the memfd; else why not.
const char* dump_in_copy(int fd, void* interp) {
    const long pid = syscall(SYS_clone, 0ul, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0) return "clone failed: no copy of the process to read the stacks in";
    if (pid == 0) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigset_t fatal;
        sigemptyset(&fatal);
        for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGALRM}) {
            sigaction(sig, &dfl, nullptr);
            sigaddset(&fatal, sig);
        }
        sigprocmask(SIG_UNBLOCK, &fatal, nullptr);
        prctl(PR_SET_DUMPABLE, 0);
        alarm(2);
        const char* err = g_api.dump(fd, interp, nullptr);
        if (err) write_all(fd, err, strlen(err)), write_all(fd, "\n", 1);
        syscall(SYS_exit_group, err ? 1 : 0);
    }
    int status = 0;
    const uint64_t deadline = now_mono_ns() + 2000000000ull;
    for (;;) {
        const pid_t r = waitpid(pid_t(pid), &status, __WCLONE | WNOHANG);
        if (r == pid_t(pid)) break;
        if (r < 0 && errno != EINTR) return nullptr;  // reaped by someone else: take what it wrote
        if (now_mono_ns() > deadline) {
            kill(pid_t(pid), SIGKILL);
            while (waitpid(pid_t(pid), &status, __WCLONE) < 0 && errno == EINTR) {
            }
            return "the dump did not finish within 2 s in a copy of the process (killed)";
        }
        usleep(200);
    }
    if (WIFSIGNALED(status))
        return "the dump crashed in a copy of the process (the job is unharmed): stacks not captured";
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? nullptr : "the dump failed";
}

// 3.13 and 3.14: the stacks read in place from the debug offsets. Every read goes through process_vm_readv (or a
// pipe), so a pointer gone stale under a running thread ends a stack, never the job: no copy of the process needed.
// Made once and never destroyed: a capture on the exit path may come after the static destructors.
pydbg::SelfMemory& self_memory() {
    static pydbg::SelfMemory* m = new pydbg::SelfMemory;
    return *m;
}
char g_walk_why[192];  // under g_busy

struct FdSink final : pydbg::TextSink {
    int fd;
    explicit FdSink(int f) : fd(f) {}
    void put(const char* s, size_t n) override { write_all(fd, s, n); }
};

const char* walk_in_place(int fd, void* interp) {
    FdSink sink(fd);
    pydbg::WalkResult r;
    char why[160] = {};
    if (pydbg::walk(self_memory(), g_api.layout, g_api.runtime, uint64_t(uintptr_t(interp)), g_api.types, sink, r, why,
                    sizeof why))
        return nullptr;
    snprintf(g_walk_why, sizeof g_walk_why, "CPython 3.%d's stacks not read: %s", g_api.layout.minor, why);
    return g_walk_why;
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
    RegionWriter out = RegionWriter::newest(rt);
    try {
        if (!rt.cfg.py_stacks) {
            if (h->py_stacks_status.load() != uint32_t(Status::Disabled)) out.text("", Status::Disabled, reason);
            return Status::Disabled;
        }
        if (!g_api.looked_up) look_up(g_api);
        // No CPython here (or not running): nothing of it is called, and the region says so once. A CPython that has
        // finalized (a SIGTERM or the exit after the interpreter's end) keeps the stacks it had: they are its last.
        if (!g_api.is_initialized || g_api.is_initialized() != 1) {
            const uint32_t had = h->py_stacks_status.load();
            if (had != uint32_t(Status::NotPython) && had != uint32_t(Status::Captured))
                out.text("", Status::NotPython, reason);
            return Status::NotPython;
        }
        // 3.13 and 3.14 (their debug offsets) before the dump: they export none, and the walk needs no copy.
        if (!g_api.layout_read) {
            g_api.layout_read = true;
            if (g_api.runtime)
                pydbg::read_layout(self_memory(), g_api.runtime, g_api.layout, g_api.layout_why,
                                   sizeof g_api.layout_why);
        }
        const bool by_offsets = g_api.layout.minor != 0;
        if (!by_offsets && (!g_api.dump || !g_api.interp_main)) {
            char msg[224];
            if (g_api.layout.version)  // a table of a version not known: its words say which
                snprintf(msg, sizeof msg, "Python stacks not available: %s", g_api.layout_why);
            else
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
        uint64_t idents[kMaxNcclThreads];
        int n_idents = 0;
        for (int i = 0; i < n; ++i) {
            const uint64_t ident = g_threads[i].ident.load(std::memory_order_acquire);
            if (!ident) continue;
            idents[n_idents++] = ident;
            char line[96];
            const int len = snprintf(line, sizeof line, "# ncclwatch nccl-thread 0x%016llx tid %u\n",
                                     (unsigned long long)ident, g_threads[i].tid.load(std::memory_order_relaxed));
            if (len > 0) write_all(g_memfd, line, size_t(len));
        }
        void* interp = g_api.interp_main ? g_api.interp_main() : nullptr;
        const char* err = by_offsets ? walk_in_place(g_memfd, interp)
                          : interp   ? dump_in_copy(g_memfd, interp)
                                     : "no main interpreter";
        g_last_ns.store(now_mono_ns() - t0, std::memory_order_relaxed);
        if (err) {
            NCW_LOG_ONCE(warn, "Python stacks: {} (said once)", err);
            out.text(err, Status::Failed, reason);
            return Status::Failed;
        }
        out.begin();
        const size_t got = copy_out(g_memfd, out.region, out.capacity, idents, n_idents);
        out.end(uint32_t(got), Status::Captured, reason);
        hold_first_stall_capture(rt, out, reason, uint32_t(got));
        return Status::Captured;
    } catch (...) {
        return Status::Failed;
    }
}

}  // namespace ncw

// How the process ends: see process_end.h.
#include "shim/watch/process_end.h"

#include <dlfcn.h>
#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "read/redact.h"
#include "shim/record/own_mapping.h"
#include "shim/record/runtime.h"

namespace ncw {
namespace {

std::atomic<disk::FileHeader*> g_hdr{nullptr};
std::atomic<int64_t> g_owner_pid{0};
std::atomic<uint32_t> g_torch_timeout_ms{0};  // the shortest torch process-group timeout noted (0: none yet)

// `slot` becomes `ms` where that is shorter, or where it held none.
void keep_shortest(std::atomic<uint32_t>& slot, uint32_t ms) {
    uint32_t old = slot.load(std::memory_order_relaxed);
    while ((old == 0 || ms < old) && !slot.compare_exchange_weak(old, ms, std::memory_order_relaxed)) {
    }
}

// The noted timeout into this process's rank file (not a forked child's copy of its parent's).
void note_torch_timeout_into(disk::FileHeader* h) {
    const uint32_t ms = g_torch_timeout_ms.load(std::memory_order_relaxed);
    if (h && ms && getpid() == g_owner_pid.load(std::memory_order_relaxed)) keep_shortest(h->torch_timeout_ms, ms);
}
std::atomic<int> g_final{0};
std::atomic<int> g_final_sig{0};
std::atomic<uint64_t> g_absorbed_ns{0};  // when the program's handler took a SIGTERM or SIGINT and went on (absorbed)
std::atomic<int> g_absorbed_sig{0};
// The end recorded is the absorbed signal's, written before its handler ran: the process's real end replaces it, and
// the watchdog undoes it (end_signal_absorbed), whichever comes first.
std::atomic<bool> g_end_provisional{false};
sem_t g_wake;
std::atomic<bool> g_wake_ready{false};

constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kTerm[] = {SIGTERM, SIGINT};
struct sigaction g_old[NSIG];  // the dispositions we replaced, by signal

using ExitFn = void (*)(int);
ExitFn g_real_exit = nullptr;  // _exit
ExitFn g_real_Exit = nullptr;  // _Exit

uint64_t mono_now() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The previous disposition of `sig`, as if we had never been there: a handler is called, SIG_DFL restored and the
// signal raised again (SA_RESETHAND semantics: a core dump, or Python's faulthandler, still happen), SIG_IGN ignored.
void chain(int sig, siginfo_t* info, void* ctx) noexcept {
    const struct sigaction& old = g_old[sig];
    if (old.sa_flags & SA_SIGINFO) {
        if (old.sa_sigaction) {
            old.sa_sigaction(sig, info, ctx);
            return;
        }
    } else if (old.sa_handler == SIG_IGN) {
        return;
    } else if (old.sa_handler != SIG_DFL) {
        old.sa_handler(sig);
        return;
    }
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    // Unblocked, so it is delivered now (a fault returns into the faulting instruction and faults again otherwise).
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    raise(sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
}

// The live digest client sends how the process ended (protocol 1.6) before it is gone: woken through its eventfd and
// waited for briefly (write and nanosleep are async-signal-safe). A client stuck behind a lock the dying thread holds
// costs this wait, never more.
void tell_live_end() noexcept {
    Runtime* rt = runtime();
    if (!rt || getpid() != g_owner_pid.load(std::memory_order_relaxed)) return;
    const int fd = rt->live_end.wake_fd.load(std::memory_order_acquire);
    if (fd < 0) return;
    const uint32_t asked = rt->live_end.asked.fetch_add(1, std::memory_order_acq_rel) + 1;
    const uint64_t one = 1;
    if (::write(fd, &one, sizeof one) != ssize_t(sizeof one)) return;
    const uint64_t until = mono_now() + uint64_t(kLiveEndWaitMs) * 1000000ull;
    while (rt->live_end.sent.load(std::memory_order_acquire) < asked && mono_now() < until) {
        timespec ts{0, 1000000};
        nanosleep(&ts, nullptr);
    }
}

// A SIGTERM or SIGINT the program's handler took, the process going on: a later end gets its final verdict again,
// and the watchdog undoes the end recorded once the process has outlived the signal (end_signal_absorbed).
void absorbed(int sig) noexcept {
    if (getpid() != g_owner_pid.load(std::memory_order_relaxed)) return;
    int done = 2;
    g_final.compare_exchange_strong(done, 0, std::memory_order_acq_rel);
    g_absorbed_sig.store(sig, std::memory_order_relaxed);
    const uint64_t now = mono_now();
    if (disk::FileHeader* h = g_hdr.load(std::memory_order_acquire)) {
        h->absorbed_signal.store(sig, std::memory_order_relaxed);
        h->absorbed_mono_ns.store(now ? now : 1, std::memory_order_release);
        g_end_provisional.store(h->end_kind.load(std::memory_order_acquire) == uint32_t(disk::EndKind::Terminated) &&
                                    h->end_status.load(std::memory_order_relaxed) == sig,
                                std::memory_order_release);
    }
    g_absorbed_ns.store(now ? now : 1, std::memory_order_release);
}

void on_fatal(int sig, siginfo_t* info, void* ctx) {
    const int saved = errno;
    // Our own rank file cut under us: the pages lost become memory of ours and the access goes on (own_mapping.h).
    if (sig == SIGBUS && info && own_mapping_rescue(info->si_addr)) {
        errno = saved;
        return;
    }
    record_end(disk::EndKind::FatalSignal, sig);
    tell_live_end();
    errno = saved;
    chain(sig, info, ctx);
}

void on_term(int sig, siginfo_t* info, void* ctx) {
    const int saved = errno;
    record_end(disk::EndKind::Terminated, sig);
    int expect = 0;
    if (getpid() == g_owner_pid.load(std::memory_order_relaxed) && g_final.compare_exchange_strong(expect, 1)) {
        g_final_sig.store(sig, std::memory_order_relaxed);
        if (g_wake_ready.load(std::memory_order_acquire)) sem_post(&g_wake);
        // The watchdog writes the verdict, the report and the dump; waited for here, bounded (nanosleep is
        // async-signal-safe).
        const uint64_t until = mono_now() + uint64_t(kFinalWaitMs) * 1000000ull;
        while (g_final.load(std::memory_order_acquire) != 2 && mono_now() < until) {
            timespec ts{0, 2000000};
            nanosleep(&ts, nullptr);
        }
    }
    errno = saved;
    chain(sig, info, ctx);
    // Still here: the program's own handler took the signal and went on (a checkpoint on preemption, say). Not an end:
    // a later end gets its own final verdict, and the watchdog undoes what record_end wrote once the process has
    // outlived the signal (end_signal_absorbed), so that the job is judged on what happens next.
    absorbed(sig);
}

// glibc's on_exit: exit() and a return from main, with the status.
void on_exit_status(int status, void*) {
    const int saved = errno;
    record_end(disk::EndKind::Exit, status);
    tell_live_end();
    errno = saved;
}

void install(int sig, void (*fn)(int, siginfo_t*, void*)) {
    struct sigaction sa {};
    sa.sa_sigaction = fn;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) return;
    // Ignored by the host (nohup, a launcher's choice): left so.
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) return;
    g_old[sig] = old;
    sigaction(sig, &sa, nullptr);
}

}  // namespace

void record_end(disk::EndKind kind, int32_t status) noexcept {
    disk::FileHeader* h = g_hdr.load(std::memory_order_acquire);
    if (!h) return;
    if (getpid() != g_owner_pid.load(std::memory_order_relaxed)) return;  // a forked or vforked child
    uint64_t none = 0;
    const uint64_t now = mono_now();
    // The first end stands, but for one a signal's handler absorbed: how the process really ended replaces it (an
    // exit 0 after running out of work, an exit with a code in answer to the signal).
    if (!h->end_mono_ns.compare_exchange_strong(none, now ? now : 1, std::memory_order_relaxed)) {
        if (!g_end_provisional.exchange(false, std::memory_order_acq_rel)) return;
        h->end_mono_ns.store(now ? now : 1, std::memory_order_relaxed);
    }
    h->end_status.store(status, std::memory_order_relaxed);
    // The thread that took the end path (format 1.12): torch's NCCL watchdog raises SIGABRT in its own
    // ("pt_nccl_watchdg"). prctl is a system call, async-signal-safe.
    char name[16] = {};
    prctl(PR_GET_NAME, name);
    std::memcpy(h->end_thread, name, sizeof name);
    h->end_kind.store(uint32_t(kind), std::memory_order_release);
}

void install_end_paths(Runtime& rt) {
    static bool done = false;
    g_owner_pid.store(getpid(), std::memory_order_relaxed);
    g_hdr.store(rt.file.hdr, std::memory_order_release);
    note_torch_timeout_into(rt.file.hdr);  // one noted before the first communicator (torch's lazy init)
    if (done) return;
    done = true;
    if (sem_init(&g_wake, 0, 0) == 0) g_wake_ready.store(true, std::memory_order_release);
    ::on_exit(on_exit_status, nullptr);
    for (int sig : kFatal) install(sig, on_fatal);
    for (int sig : kTerm) install(sig, on_term);
}

int end_signal_absorbed(uint64_t now_ns) noexcept {
    const uint64_t at = g_absorbed_ns.load(std::memory_order_acquire);
    if (!at || now_ns < at || now_ns - at < kAbsorbedAfterNs) return 0;
    g_absorbed_ns.store(0, std::memory_order_relaxed);
    const int sig = g_absorbed_sig.load(std::memory_order_relaxed);
    disk::FileHeader* h = g_hdr.load(std::memory_order_acquire);
    // Only the end that signal wrote, if no real end replaced it since (an exit, a KeyboardInterrupt that ended the
    // program).
    if (!h || !g_end_provisional.exchange(false, std::memory_order_acq_rel)) return 0;
    h->end_kind.store(uint32_t(disk::EndKind::None), std::memory_order_release);
    h->end_status.store(0, std::memory_order_relaxed);
    std::memset(h->end_thread, 0, sizeof h->end_thread);
    h->end_mono_ns.store(0, std::memory_order_release);
    return sig;
}

bool final_verdict_wanted() noexcept { return g_final.load(std::memory_order_acquire) == 1; }
void final_verdict_done() noexcept { g_final.store(2, std::memory_order_release); }
int final_verdict_signal() noexcept { return g_final_sig.load(std::memory_order_relaxed); }

void wait_for_wake(uint64_t ns) noexcept {
    if (!g_wake_ready.load(std::memory_order_acquire)) {
        timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
        nanosleep(&ts, nullptr);
        return;
    }
    timespec until{};
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += time_t(ns / 1000000000ull);
    until.tv_nsec += long(ns % 1000000000ull);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
    }
    while (sem_timedwait(&g_wake, &until) != 0 && errno == EINTR) {
    }
}

void block_end_signals_here() noexcept {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kTerm) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace ncw

namespace {
// Resolved at load time: _exit runs in signal handlers and vforked children, where dlsym may not.
[[gnu::constructor]] void find_real_exits() {
    ncw::g_real_exit = reinterpret_cast<ncw::ExitFn>(dlsym(RTLD_NEXT, "_exit"));
    ncw::g_real_Exit = reinterpret_cast<ncw::ExitFn>(dlsym(RTLD_NEXT, "_Exit"));
}

[[noreturn]] void exit_now(ncw::ExitFn real, int status) {
    if (real) real(status);
    for (;;) ::syscall(SYS_exit_group, status);
}
}  // namespace

// The process's last words (format 1.9), from the launcher's Python hook (python/ncclwatch/_boot) through
// ctypes: an uncaught exception's "Type: message (file:line)". The first call wins. One from the main thread means
// the interpreter is exiting (its handlers and torch's teardown can take seconds): the live collector is told at
// once. The text is redacted first (an exception's message can quote a signed URL or a header): the rank file never
// holds a secret. Returns 0 when recorded; 1 when not (no rank file yet, a forked child, already said, no text, or no
// memory to redact it in).
extern "C" __attribute__((visibility("default"))) int ncclwatch_note_exception(const char* text, int main_thread) {
    const int saved = errno;
    int rc = 1;
    ncw::disk::FileHeader* h = ncw::g_hdr.load(std::memory_order_acquire);
    // One writer: two threads dying at once must not interleave their texts.
    static std::atomic<bool> claimed{false};
    std::string said;
    try {
        if (h && text && *text) said = ncw::redact::value(text);
    } catch (...) {  // no memory: nothing recorded rather than a secret
    }
    if (h && !said.empty() && getpid() == ncw::g_owner_pid.load(std::memory_order_relaxed) &&
        h->last_words_mono_ns.load(std::memory_order_acquire) == 0 && !claimed.exchange(true)) {
        // One line of printable text, cut at a UTF-8 character's start: it goes into reports and logs as is.
        size_t n = 0;
        const size_t cap = sizeof h->last_words - 1;
        for (; n < said.size() && n < cap; ++n) {
            const unsigned char c = static_cast<unsigned char>(said[n]);
            h->last_words[n] = c < 0x20 || c == 0x7f ? ' ' : char(c);
        }
        while (n > 0 && n < said.size() && (static_cast<unsigned char>(said[n]) & 0xC0) == 0x80) --n;  // mid-character
        h->last_words[n] = '\0';
        h->last_words_main = main_thread ? 1 : 0;
        const uint64_t now = ncw::mono_now();
        h->last_words_mono_ns.store(now ? now : 1, std::memory_order_release);
        if (main_thread) ncw::tell_live_end();
        rc = 0;
    }
    errno = saved;
    return rc;
}

// The timeout of a torch process group this process made (format 1.15), from the launcher's Python hook through
// ctypes, in seconds: the shortest is kept, the one torch's NCCL watchdog acts on first. torch makes its NCCL
// communicators lazily (at the first collective, without device_id), so a timeout noted before the rank file exists is
// held here and written when it does (install_end_paths). Returns 0 when kept, 1 when not (a value out of range).
extern "C" __attribute__((visibility("default"))) int ncclwatch_note_torch_timeout(double seconds) {
    const int saved = errno;
    int rc = 1;
    if (seconds > 0 && seconds < 4.0e6) {
        ncw::keep_shortest(ncw::g_torch_timeout_ms, std::max<uint32_t>(1, uint32_t(seconds * 1000.0 + 0.5)));
        ncw::note_torch_timeout_into(ncw::g_hdr.load(std::memory_order_acquire));
        rc = 0;
    }
    errno = saved;
    return rc;
}

// _exit and _Exit (Python's os._exit, a launcher-style child's fast exit): recorded, then the real one. exit()
// reaches the kernel through glibc's own _exit, not through these.
extern "C" __attribute__((visibility("default"), noreturn)) void _exit(int status) {
    ncw::record_end(ncw::disk::EndKind::Exit, status);
    ncw::tell_live_end();
    exit_now(ncw::g_real_exit, status);
}

extern "C" __attribute__((visibility("default"), noreturn)) void _Exit(int status) {
    ncw::record_end(ncw::disk::EndKind::Exit, status);
    ncw::tell_live_end();
    exit_now(ncw::g_real_Exit, status);
}

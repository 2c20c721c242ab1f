// How the process ends (format 1.5: FileHeader::end_kind, end_status, end_mono_ns), recorded on async-signal-safe
// paths: exit and return from main (glibc's on_exit gives the status), _exit and _Exit (interposed here: Python's
// os._exit), the fatal signals SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (recorded, then chained to the previous
// handler or disposition), and SIGTERM / SIGINT from a launcher (recorded; the watchdog thread is woken for a final
// verdict from the siblings' files, which the handler waits for up to kFinalWaitMs; then the signal goes on to the
// previous disposition). Only the process that owns the rank file records: a forked or vforked child shares the
// mapping and is told apart by its pid.
#pragma once

#include <atomic>
#include <cstdint>

#include "ncclwatch/format.h"

namespace ncw {

struct Runtime;

inline constexpr int kFinalWaitMs = 1500;
// How long an exit or a fatal signal waits for the live digest client to send how the process ended (protocol 1.6).
inline constexpr int kLiveEndWaitMs = 200;

// Installs the exit and signal paths (once per process, at the runtime's start; idempotent).
void install_end_paths(Runtime& rt);

// Records the end (first caller wins). Async-signal-safe.
void record_end(disk::EndKind kind, int32_t status) noexcept;

// The final verdict a SIGTERM / SIGINT asked for: 0 none, 1 asked (the handler waits), 2 written. The watchdog
// takes it (final_verdict_wanted), writes the report and dump, then final_verdict_done().
bool final_verdict_wanted() noexcept;
void final_verdict_done() noexcept;
// A SIGTERM or SIGINT that the program's own handler took, after which the process went on (a checkpoint on
// preemption, say; Python's KeyboardInterrupt while a call blocks): once the process has outlived it by
// kAbsorbedAfterNs, the end it recorded is undone, so that the job is judged on what happens next. Called by the
// watchdog at each poll; returns the signal when it undid an end now, else 0.
constexpr uint64_t kAbsorbedAfterNs = disk::kAbsorbedWindowNs;
int end_signal_absorbed(uint64_t now_ns) noexcept;
// Wakes the watchdog's sleep; the watchdog waits on it (poll_ms at most) instead of sleeping.
void wait_for_wake(uint64_t ns) noexcept;
// The signal that asked for the final verdict.
int final_verdict_signal() noexcept;

// Blocks SIGTERM and SIGINT in the calling thread (our threads: the handler must run on a host thread while the
// watchdog writes the final verdict).
void block_end_signals_here() noexcept;

}  // namespace ncw

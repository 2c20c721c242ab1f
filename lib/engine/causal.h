// Causal order across a job's processes (issue 14): the first rank to depart (exit, fatal signal, SIGKILL) or to
// fail a call is where the job's trouble began; what the others did afterwards (a launcher's SIGTERM, a call that
// failed because a peer was gone) is a consequence. Each view is put back to that first moment: later departures and
// failures are undone (those ranks count as alive and waiting, their ops issued after it as not issued yet), with
// one note per consequence for the evidence. First, a rank that tore a blocking communicator down (destroy or
// finalize) and then exited with code 0 is credited with every op it issued there: NCCL returns from those calls
// only once their work is done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

struct CausalOrder {
    bool any = false;                 // some rank departed or failed: the views were put back to `first_ns`
    uint64_t first_ns = 0;            // the first departure or failure, on the views' clock
    bool ended_together = false;      // every rank departed at that moment, none by its own exit, crash or error: the
                                      // job was ended from outside (all killed at once), which is no hang
    bool first_from_outside = false;  // the first departures were all signals from outside (SIGTERM, SIGINT, or a
                                      // kill with no end recorded), no rank's own exit, crash or failed call: with a
                                      // hang before them, a launcher tearing the job down (node by node, maybe)
    std::vector<std::string> notes;   // "rank 2 (pid ...): terminated by SIGTERM 0.31 s after ...: a consequence"
};

// Ranks whose departure or failure lies within this of the first one's are taken as simultaneous with it (a SIGKILLed
// process's last heartbeat is up to one watchdog poll before its death).
inline constexpr uint64_t kSimultaneousNs = 150'000'000;

// `now_ns`: the views' "now" (heartbeat ages are measured from it). Changes the views' rank states in place.
CausalOrder order_causally(const std::vector<CommView*>& views, uint64_t now_ns);

// Whether the job was already hung when it was ended from outside (together, or first by outside signals): before `t`
// (the common end), a rank's shim had reported a stall, or a rank had waited in an outstanding collective, send or
// receive, or inside a communicator's teardown, for `timeout_s` or more. A hung job that a scheduler or a person
// then killed at once is still that hang, not "killed together, not a hang".
bool hung_before(const std::vector<CommView*>& views, uint64_t t, double timeout_s);

// Such a hang is judged as it stood when it was ended: every rank that departed at that moment is put back alive
// (with no end recorded), to be judged at `first_ns`.
void revive_ended_together(const std::vector<CommView*>& views);

// How a departed rank ended, in words: "exited (exit code 3)", "crashed with SIGSEGV (signal 11)", "was terminated by
// SIGTERM", "exited cleanly (exit handlers ran)", "is gone (killed?; heartbeat 2.0 s old)" (no end recorded: SIGKILL).
std::string end_words(const RankCommState& r);
// Whether torch's NCCL watchdog ended the process: SIGABRT raised in one of its threads (format 1.12 end_thread):
// pt_nccl_watchdg on a collective past the process group's timeout (or an error it caught), pt_nccl_heartbt when the
// watchdog itself stopped. A wait given up, not a death of the rank's own.
// Or its communicators aborted from such a thread (TORCH_NCCL_ASYNC_ERROR_HANDLING=1 or 2), the process ended since
// (not before: a rank already ending on its launcher's SIGTERM was ended by the launcher).
bool ended_by_torch_watchdog(const RankCommState& r);
// When: the watchdog's abort where one came first, else the end.
uint64_t torch_watchdog_end_ns(const RankCommState& r);
// An exit with a code within disk::kAbsorbedWindowNs of a SIGTERM / SIGINT its own handler took (format 1.13): its
// answer to that signal (a handler that sets a flag the loop reads, then sys.exit(143)). Judged as a termination by
// that signal (a launcher's teardown beside a failure is a consequence), told as the exit it was.
bool exit_on_signal(const RankCommState& r);
// A termination by SIGTERM / SIGINT: recorded as such, or an exit in answer to one (exit_on_signal).
bool ended_by_term_signal(const RankCommState& r);
// Whether the process ended cleanly: an exit code 0, or exit handlers that ran with no code known (they run at
// sys.exit(1) and after an uncaught exception too, so "exited_clean" alone is no clean end).
bool ended_clean(const RankCommState& r);

}  // namespace ncw::verdict

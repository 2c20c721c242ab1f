// The watchdog's decision for one communicator, apart from its thread, its clock and the files: what one poll read of
// the communicator's progress block goes in, what to do comes out (a stall to report, once; a recovery; a wait past
// the gap baseline's threshold to put to the engine; an init hang). The watchdog (watchdog.cpp) reads the facts, acts
// on the answer (the analysis, the reports, the dumps, NCCLWATCH_ACTION) and tells the clock what the engine said.
#pragma once

#include <cstdint>

#include "ncclwatch/format.h"
#include "shim/watch/gap_baseline.h"

namespace ncw {

// What one poll read of a communicator's progress block.
struct ProgressFacts {
    uint64_t issued = 0;            // ops_issued
    uint64_t completed = 0;         // ops_completed
    uint64_t failed = 0;            // ops_failed (format 1.5): ended, never completed, and not outstanding either
    uint64_t last_progress_ns = 0;  // t_last_progress_ns: the last completion that proved the GPU moved, or the
                                    // issue of an op into an idle communicator (the recorder restarts the clock)
    uint64_t wait_began_ns = 0;     // when the engine says this rank's wait began (wait_began below)
    uint64_t failed_calls = 0;      // CommRuntime::failed_ops: calls that returned an error, and asynchronous errors

    uint64_t done() const { return completed + failed; }
    bool outstanding() const { return issued > done(); }
};

// When the engine (lib/engine/verdict_ranks.cpp) says this rank's wait began: the later of the last progress and the
// issue of the oldest incomplete collective, where the signature window still has it.
uint64_t wait_began(const disk::CommSlot& s, uint64_t since);
// The facts of a slot as the watchdog's poll reads them; failed_calls is the communicator runtime's.
ProgressFacts read_progress(const disk::CommSlot& s, uint64_t failed_calls);

// NCCLWATCH_TIMEOUT_SEC and NCCLWATCH_SUSPECT.
struct StallLimits {
    double timeout_s = 60;
    bool suspect = true;
    uint64_t timeout_ns() const { return uint64_t(timeout_s * 1e9); }
};

enum class StallStep : uint8_t {
    None,        // nothing to do
    Stalled,     // an op outstanding with no progress for the timeout: report it (once, until it recovers)
    Recovered,   // a reported stall or suspicion ended: say so
    AskSuspect,  // a wait past the baseline's threshold, short of the timeout: ask the engine, then tell the clock
                 // (suspect_confirmed or suspect_declined)
    InitHang,    // an init that has not returned for the timeout: report it (once)
};

struct StallDecision {
    StallStep step = StallStep::None;
    uint64_t since_ns = 0;       // Stalled, AskSuspect: the last progress (init: the init's start)
    double waited_s = 0;         // Stalled, AskSuspect, InitHang: the wait so far; Recovered: how long it lasted
    double suspected_at_s = -1;  // Stalled: the wait when it was suspected (-1: it was not)
    double after_s = 0;          // AskSuspect (not an init's): the threshold passed
    bool was_stall = false;      // Recovered: a stall (false: a suspicion that never became one)
    bool by_failure = false;     // Recovered: ended by an error (an abort, a timeout in NCCL), not a recovery
    bool p99_changed = false;    // the baseline's p99 changed this poll: to be published (completion_gap_p99_ns)
};

// One communicator's stall clock between the watchdog's polls.
class StallClock {
public:
    // One poll of a live communicator's progress at `now`: the baseline fed (with suspicion on), then the decision.
    // Stalled and Recovered are taken as done (the clock is in its new state); AskSuspect waits for the engine.
    StallDecision poll(const ProgressFacts& f, uint64_t now, const StallLimits& lim);
    // The engine agreed (AskSuspect): the wait that began at `since_ns` (the decision's) is suspected at `now` (the
    // poll's); `after` is the progress block read again once the engine answered, what a recovery must go past.
    void suspect_confirmed(uint64_t since_ns, uint64_t now, const ProgressFacts& after);
    // The engine did not agree (yet): asked again after a backoff, 1 s doubling up to 8 s, until the wait changes.
    void suspect_declined(uint64_t now);
    // A reported stall or suspicion whose communicator completed work since (a destroyed communicator, which polls no
    // longer check, or any at exit): Recovered, taken as done; else None.
    StallDecision finish(const ProgressFacts& f, uint64_t now);
    // NCCLWATCH_ACTION=abort: the ops the abort releases fail, which is not the stall recovering.
    void forget_stall() { stall_reported_ = false; }

    // An init in progress since `t_init_start_ns`: InitHang once past the timeout; AskSuspect (with suspicion on) past
    // verdict::kInitSuspectS, then every 2 s while the engine does not agree.
    StallDecision poll_init(uint64_t t_init_start_ns, uint64_t now, const StallLimits& lim);
    void init_suspect_confirmed(uint64_t t_init_start_ns);

    bool stall_reported() const { return stall_reported_; }
    bool suspected() const { return suspected_; }
    bool reported() const { return stall_reported_ || suspected_; }
    double suspected_wait_s() const { return suspected_wait_s_; }
    uint64_t p99_ns() const { return published_p99_; }  // the baseline's p99 in use (0: none yet)

private:
    // Completions since the report that prove the GPU moved: ops counted done without evidence (no event to be had
    // while the stream is stuck and the host keeps issuing) advance the count but not the progress time.
    bool progressed(const ProgressFacts& f) const;
    StallDecision recover(const ProgressFacts& f, uint64_t now);

    GapBaseline gaps_;  // the baseline of this communicator's gaps (engine/suspicion.h)
    uint64_t published_p99_ = 0;
    // The progress block as the stall or suspicion was reported: what a recovery must go past.
    ProgressFacts at_report_;
    bool stall_reported_ = false;
    uint64_t stall_since_ns_ = 0;
    bool init_reported_ = false;
    // A wait reported as suspected that is not (yet) a stall.
    bool suspected_ = false;
    uint64_t suspect_since_ns_ = 0;
    double suspected_wait_s_ = 0;       // the wait when it was suspected
    uint64_t next_suspect_try_ns_ = 0;  // the engine did not agree yet: the next try
    uint64_t suspect_retry_ns_ = 0;     // and the backoff before the one after
    uint64_t suspect_try_since_ = 0;    // the wait (its last progress) those are about
};

}  // namespace ncw

#include "shim/watch/stall_decision.h"

#include <algorithm>
#include <atomic>

#include "engine/suspicion.h"

namespace ncw {

uint64_t wait_began(const disk::CommSlot& s, uint64_t since) {
    const uint64_t next = s.coll_completed.load(std::memory_order_acquire) + 1;
    if (s.coll_issued.load(std::memory_order_acquire) < next) return since;
    const disk::OpSignature& sig = s.recent[next % disk::kRecentSigs];
    if (sig.seq.load(std::memory_order_acquire) != next) return since;
    const uint64_t t = sig.t_issue_ns;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (sig.seq.load(std::memory_order_relaxed) != next) return since;  // rewritten under us (seqlock)
    return std::max(since, t);
}

ProgressFacts read_progress(const disk::CommSlot& s, uint64_t failed_calls) {
    ProgressFacts f;
    f.issued = s.ops_issued.load(std::memory_order_acquire);
    f.completed = s.ops_completed.load(std::memory_order_acquire);
    f.failed = s.ops_failed.load(std::memory_order_acquire);
    f.last_progress_ns = s.t_last_progress_ns.load(std::memory_order_relaxed);
    f.wait_began_ns = wait_began(s, f.last_progress_ns);
    f.failed_calls = failed_calls;
    return f;
}

bool StallClock::progressed(const ProgressFacts& f) const {
    return f.completed > at_report_.completed && f.last_progress_ns > at_report_.last_progress_ns;
}

StallDecision StallClock::recover(const ProgressFacts& f, uint64_t now) {
    StallDecision d;
    d.step = StallStep::Recovered;
    d.was_stall = stall_reported_;
    const uint64_t began = d.was_stall ? stall_since_ns_ : suspect_since_ns_;
    d.waited_s = now > began ? (now - began) / 1e9 : 0.0;
    d.by_failure = f.failed_calls > at_report_.failed_calls;
    stall_reported_ = false;
    suspected_ = false;
    next_suspect_try_ns_ = suspect_retry_ns_ = 0;
    return d;
}

StallDecision StallClock::poll(const ProgressFacts& f, uint64_t now, const StallLimits& lim) {
    StallDecision d;
    const uint64_t since = f.last_progress_ns;
    const bool outstanding = f.outstanding();
    if (lim.suspect) {
        // A gap that was reported (suspected or stalled) is no part of the rhythm.
        gaps_.observe(now, f.issued, f.done(), since, reported());
        const uint64_t p99 = gaps_.p99_ns();
        d.p99_changed = p99 != published_p99_;
        published_p99_ = p99;
    }
    if (reported()) {
        if (!outstanding || progressed(f)) {
            const bool p99_changed = d.p99_changed;
            d = recover(f, now);
            d.p99_changed = p99_changed;
            return d;
        }
        if (stall_reported_) return d;
    }
    if (!outstanding) return d;
    if (now > since && now - since >= lim.timeout_ns()) {
        // A suspicion confirmed: from here on it is the stall, recovered (or not) as one.
        d.step = StallStep::Stalled;
        d.since_ns = since;
        d.waited_s = (now - since) / 1e9;
        d.suspected_at_s = suspected_ ? suspected_wait_s_ : -1;
        suspected_ = false;
        stall_reported_ = true;
        stall_since_ns_ = since;
        at_report_ = f;
        return d;
    }
    if (suspected_) return d;
    // A wait past this communicator's suspicion threshold (engine/suspicion.h; below the timeout): the engine, over
    // the ranks this node sees, judges the communicator's threshold. Until it agrees (another rank's baseline is
    // wider, the wait began later than the last progress by its measure) it is asked again, less and less often.
    const double after_s = verdict::suspect_after_s(published_p99_);
    if (since != suspect_try_since_) next_suspect_try_ns_ = suspect_retry_ns_ = 0;  // a new wait
    suspect_try_since_ = since;
    if (after_s <= 0 || after_s >= lim.timeout_s || now < next_suspect_try_ns_) return d;
    const uint64_t began = f.wait_began_ns;
    if (now <= began || now - began < uint64_t(after_s * 1e9)) return d;
    d.step = StallStep::AskSuspect;
    d.since_ns = since;
    d.waited_s = (now - since) / 1e9;
    d.after_s = after_s;
    return d;
}

void StallClock::suspect_confirmed(uint64_t since_ns, uint64_t now, const ProgressFacts& after) {
    suspected_ = true;
    suspect_since_ns_ = since_ns;
    suspected_wait_s_ = (now - since_ns) / 1e9;
    at_report_ = after;
}

void StallClock::suspect_declined(uint64_t now) {
    suspect_retry_ns_ = std::clamp<uint64_t>(2 * suspect_retry_ns_, 1000000000ull, 8000000000ull);
    next_suspect_try_ns_ = now + suspect_retry_ns_;
}

StallDecision StallClock::finish(const ProgressFacts& f, uint64_t now) {
    if (reported() && progressed(f)) return recover(f, now);
    return {};
}

StallDecision StallClock::poll_init(uint64_t t_init_start_ns, uint64_t now, const StallLimits& lim) {
    StallDecision d;
    if (init_reported_ || now < t_init_start_ns) return d;
    d.since_ns = t_init_start_ns;
    d.waited_s = (now - t_init_start_ns) / 1e9;
    if (now - t_init_start_ns >= lim.timeout_ns()) {
        init_reported_ = true;
        d.step = StallStep::InitHang;
        return d;
    }
    // An init has no rhythm: past verdict::kInitSuspectS while a rank of it was never seen, suspected once
    // (engine/suspicion.h); asked again every 2 s until the engine agrees or the init ends.
    const uint64_t after_ns = uint64_t(verdict::kInitSuspectS * 1e9);
    if (!lim.suspect || suspected_ || now - t_init_start_ns < after_ns || now < next_suspect_try_ns_) return d;
    next_suspect_try_ns_ = now + 2000000000ull;
    d.step = StallStep::AskSuspect;
    return d;
}

void StallClock::init_suspect_confirmed(uint64_t t_init_start_ns) {
    suspected_ = true;
    suspect_since_ns_ = t_init_start_ns;  // a "recovered" once it finishes (poll) says how long
}

}  // namespace ncw

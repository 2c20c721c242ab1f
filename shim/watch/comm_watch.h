// What the watchdog keeps per communicator between its polls (watchdog.cpp).
#pragma once

#include <cstdint>
#include <set>

#include "engine/verdict.h"
#include "shim/record/comm_registry.h"
#include "shim/watch/stall_decision.h"

namespace ncw {

// A MISMATCH that may be the first sign of a drift (engine/verdict.h, drift_decidable) is held back until the ranks
// have issued enough ops for the drift to be told, or their op streams have stopped growing for kMismatchQuietNs (a
// hang, or the job's end: nothing more will come), kMismatchHoldMaxNs at most: a skip's own verdict then leads, with
// the MISMATCHes as its consequences, instead of a MISMATCH 9 ops after where the rank went wrong.
inline constexpr uint64_t kMismatchQuietNs = 2'000'000'000ull;
inline constexpr uint64_t kMismatchHoldMaxNs = 10'000'000'000ull;

struct CommWatch {
    // The communicator's runtime, held (CommRuntime::holds) while it is watched: a destroyed communicator's runtime
    // is not reused for a later one (comm_pool.h) while a stall reported on it may still recover. Set through watch().
    CommRuntime* cr = nullptr;
    StallClock clock;  // stalls, suspicion, recovery and the init's hang (stall_decision.h)
    uint64_t last_mismatch_seq = 0;
    uint64_t mismatch_held_ns = 0;      // a MISMATCH held back while a drift could still explain it (0: none)
    uint64_t held_issued = 0;           // the ranks' ops issued, summed, when last seen growing
    uint64_t held_quiet_ns = 0;         // since when they have not grown
    std::set<int> stragglers_reported;  // comm ranks named STRAGGLER by this process

    CommWatch() = default;
    CommWatch(const CommWatch&) = delete;  // one hold per watch
    CommWatch& operator=(const CommWatch&) = delete;
    ~CommWatch() { watch(nullptr); }
    void watch(CommRuntime* c) {
        if (c == cr) return;
        if (cr) cr->holds.fetch_sub(1);
        if (c) c->holds.fetch_add(1);
        cr = c;
    }
    // Nothing said about this communicator that a later poll must remember (so that it says it once): the watch
    // may be forgotten once the communicator is gone.
    bool said_nothing() const {
        return !clock.reported() && last_mismatch_seq == 0 && mismatch_held_ns == 0 && stragglers_reported.empty();
    }

    // Whether a MISMATCH at `seq` is still held back (see kMismatchQuietNs); forgets the hold once it is not.
    bool hold_mismatch(const verdict::CommView& view, uint64_t seq, uint64_t now) {
        if (verdict::drift_decidable(view, seq)) return release();
        uint64_t issued = 0;
        for (const verdict::RankCommState& r : view.ranks) issued += r.issued;
        if (!mismatch_held_ns) mismatch_held_ns = now;
        if (issued != held_issued || !held_quiet_ns) held_issued = issued, held_quiet_ns = now;
        if (now - held_quiet_ns < kMismatchQuietNs && now - mismatch_held_ns < kMismatchHoldMaxNs) return true;
        return release();
    }
    bool release() {
        mismatch_held_ns = held_issued = held_quiet_ns = 0;
        return false;
    }
};

}  // namespace ncw

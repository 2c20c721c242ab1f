// The running baseline of one communicator's rhythm: the gaps between completions while it is busy, as the watchdog
// sees them each poll, and their p99 (published as CommSlot::completion_gap_p99_ns; the threshold it sets is
// engine/suspicion.h's). Fixed size, nothing allocated per sample: a histogram of log-spaced buckets.
#pragma once

#include <cstdint>

namespace ncw {

// Gaps in log-spaced buckets, 4 per octave (each at most 19 % wide), from 1 us to about 73 minutes; shorter and
// longer ones fall into the end buckets. Counts halve once kWindow gaps are held, so the baseline follows a job whose
// rhythm changes (a new phase, other jobs on its GPU) and forgets what it saw thousands of gaps ago.
class GapHistogram {
public:
    static constexpr int kPerOctave = 4;
    static constexpr int kMinLog2 = 10;  // 1,024 ns
    static constexpr int kMaxLog2 = 42;  // 4.4e12 ns
    static constexpr int kBuckets = (kMaxLog2 - kMinLog2) * kPerOctave + 2;
    static constexpr uint64_t kWindow = 1024;

    void add(uint64_t gap_ns, uint64_t n = 1);
    // The q-quantile (0 < q <= 1) as the upper edge of its bucket (an overestimate by at most a bucket: a threshold
    // errs late, not early); 0 when empty.
    uint64_t quantile_ns(double q) const;
    uint64_t held() const { return held_; }    // gaps counted now (after the halvings)
    uint64_t added() const { return added_; }  // gaps ever added

    static int bucket_of(uint64_t gap_ns);
    static uint64_t upper_edge(int bucket);

private:
    uint64_t counts_[kBuckets] = {};
    uint64_t held_ = 0;
    uint64_t added_ = 0;
};

// Turns the watchdog's polls of a progress block (ops issued and completed, the last progress time) into gaps. A gap
// runs from a completion, or from an op issued into an idle communicator (the recorder restarts the stall clock
// there), to the next completion; time with nothing outstanding is no gap. Several completions between two polls
// share the time between them: the first gets at least what the wait had lasted at the earlier poll (so a long
// gap is seen whole at poll resolution), the others the rest in equal parts.
class GapBaseline {
public:
    // The first gaps are ignored: lazy connection setup, the first step's allocations and compilation.
    static constexpr uint64_t kWarmupGaps = 5;
    // Never a baseline from fewer gaps: the p99 of n < 100 gaps is their maximum, and of a handful it is whatever
    // the first steps did (a job's first gaps are all of one kind: the ones its first iterations make); 20 gaps
    // cover a few steps of a training loop, enough to have seen its slowest regular gap at least once.
    static constexpr uint64_t kMinGaps = 20;

    // One poll: `now`, the block's ops_issued, ops_completed and t_last_progress_ns. `outlier`: the gap that ended
    // since the last poll was reported (suspected or stalled): it is left out, a hang is not the rhythm.
    void observe(uint64_t now, uint64_t issued, uint64_t completed, uint64_t last_progress_ns, bool outlier);
    // The p99 once there are kMinGaps gaps (after the warm-up), else 0.
    uint64_t p99_ns() const;
    const GapHistogram& histogram() const { return hist_; }

private:
    void gap(uint64_t ns, uint64_t n, bool outlier);

    GapHistogram hist_;
    uint64_t warmup_left_ = kWarmupGaps;
    bool have_prev_ = false;
    bool prev_busy_ = false;
    uint64_t prev_now_ = 0, prev_completed_ = 0, prev_progress_ = 0;
};

}  // namespace ncw

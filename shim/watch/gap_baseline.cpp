#include "shim/watch/gap_baseline.h"

#include <algorithm>

namespace ncw {

int GapHistogram::bucket_of(uint64_t gap_ns) {
    if (gap_ns < (uint64_t(1) << kMinLog2)) return 0;
    const int e = 63 - __builtin_clzll(gap_ns);
    if (e >= kMaxLog2) return kBuckets - 1;
    // The two bits after the leading one: which quarter of the octave.
    const int quarter = int((gap_ns >> (e - 2)) & 3);
    return 1 + (e - kMinLog2) * kPerOctave + quarter;
}

uint64_t GapHistogram::upper_edge(int bucket) {
    if (bucket <= 0) return uint64_t(1) << kMinLog2;
    if (bucket >= kBuckets - 1) return uint64_t(1) << (kMaxLog2 + 1);  // past the range: twice its end
    const int e = (bucket - 1) / kPerOctave + kMinLog2;
    const int quarter = (bucket - 1) % kPerOctave;
    return uint64_t(4 + quarter + 1) << (e - 2);
}

void GapHistogram::add(uint64_t gap_ns, uint64_t n) {
    if (n == 0) return;
    counts_[bucket_of(gap_ns)] += n;
    held_ += n;
    added_ += n;
    while (held_ >= kWindow) {
        held_ = 0;
        for (uint64_t& c : counts_) held_ += (c /= 2);
    }
}

uint64_t GapHistogram::quantile_ns(double q) const {
    if (held_ == 0) return 0;
    // The smallest bucket with at least ceil(q * held) gaps at or below it.
    const double want = q * double(held_);
    uint64_t below = 0;
    for (int b = 0; b < kBuckets; ++b) {
        below += counts_[b];
        if (below > 0 && double(below) >= want) return upper_edge(b);
    }
    return upper_edge(kBuckets - 1);
}

void GapBaseline::gap(uint64_t ns, uint64_t n, bool outlier) {
    while (n > 0 && warmup_left_ > 0) {
        --n;
        --warmup_left_;
    }
    if (n > 0 && !outlier) hist_.add(ns, n);
}

void GapBaseline::observe(uint64_t now, uint64_t issued, uint64_t completed, uint64_t last_progress_ns, bool outlier) {
    // Counters that went back: another communicator in a reused slot. Start over from this poll.
    if (have_prev_ && (completed < prev_completed_ || last_progress_ns < prev_progress_)) have_prev_ = false;
    // A gap ends where ops completed AND the progress time moved. Completions without it (counted done without
    // evidence from the GPU) are no gap's end: the current gap goes on. The time moving alone is an op issued into an
    // idle communicator: a gap begins there.
    if (have_prev_ && completed > prev_completed_ && last_progress_ns > prev_progress_) {
        const uint64_t k = completed - prev_completed_;
        // Idle at the last poll: this gap began with an op issued after it.
        const uint64_t start = prev_busy_ ? prev_progress_ : std::max(prev_progress_, prev_now_);
        const uint64_t span = last_progress_ns > start ? last_progress_ns - start : 0;
        const uint64_t waited = prev_busy_ && prev_now_ > prev_progress_ ? prev_now_ - prev_progress_ : 0;
        const uint64_t first = std::min(span, std::max(span / k, waited));
        gap(first, 1, outlier);
        if (k > 1) gap((span - first) / (k - 1), k - 1, false);
    }
    have_prev_ = true;
    prev_busy_ = issued > completed;
    prev_now_ = now;
    prev_completed_ = completed;
    prev_progress_ = last_progress_ns;
}

uint64_t GapBaseline::p99_ns() const {
    if (hist_.added() < kMinGaps) return 0;
    return hist_.quantile_ns(0.99);
}

}  // namespace ncw

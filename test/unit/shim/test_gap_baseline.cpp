// The baseline of the gaps between completions (shim/watch/gap_baseline.h): the histogram, and the gaps the
// watchdog's polls of a progress block make, on simulated timelines.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "shim/watch/gap_baseline.h"

using ncw::GapBaseline;
using ncw::GapHistogram;

namespace {

constexpr uint64_t kMs = 1'000'000ull;

// A communicator's timeline as the recorder writes it, polled the way the watchdog does: ops issued and completed,
// and the last progress time (a completion, or an op issued into an idle communicator).
struct Sim {
    GapBaseline b;
    uint64_t t = 100000 * kMs;  // now
    uint64_t issued = 0, completed = 0, progress = 0;
    uint64_t next_poll = 0;
    uint64_t poll_ns = 100 * kMs;
    bool outlier = false;

    void poll_until(uint64_t until) {
        if (!next_poll) next_poll = t;
        while (next_poll <= until) {
            b.observe(next_poll, issued, completed, progress, outlier);
            next_poll += poll_ns;
        }
        t = until;
    }
    void issue() {
        if (completed == issued) progress = t;  // into an idle communicator: the stall clock starts now
        ++issued;
    }
    void complete() {
        ++completed;
        progress = t;
    }
    // One op that takes `ms` on the GPU, issued into an idle communicator.
    void op(double ms) {
        issue();
        poll_until(t + uint64_t(ms * double(kMs)));
        complete();
    }
    void idle(double ms) { poll_until(t + uint64_t(ms * double(kMs))); }
    // Until the watchdog has polled once more: what happened so far is observed.
    void settle() { poll_until(next_poll); }
    // Ops always in flight (a framework runs ahead): one completes every `ms`.
    void busy(int n, double ms) {
        issue();
        for (int i = 0; i < n; ++i) {
            issue();
            poll_until(t + uint64_t(ms * double(kMs)));
            complete();
        }
        poll_until(t + 1);
        complete();  // the last one in flight
    }
};

}  // namespace

TEST_CASE("buckets are log-spaced, contiguous and at most a quarter octave wide") {
    uint64_t prev = 0;
    for (int b = 0; b < GapHistogram::kBuckets; ++b) {
        const uint64_t edge = GapHistogram::upper_edge(b);
        CHECK(edge > prev);
        if (b > 1 && b < GapHistogram::kBuckets - 1) CHECK(double(edge) / double(prev) <= 1.26);
        prev = edge;
    }
    const std::vector<uint64_t> gaps{0, 1, 1023, 1024, 5 * kMs, 12345678, 3'000 * kMs, uint64_t(1) << 50};
    for (uint64_t g : gaps) {
        const int b = GapHistogram::bucket_of(g);
        INFO("gap " << g << " bucket " << b);
        CHECK(b >= 0);
        CHECK(b < GapHistogram::kBuckets);
        if (b < GapHistogram::kBuckets - 1) CHECK(g < GapHistogram::upper_edge(b));
        if (b > 0) CHECK(g >= GapHistogram::upper_edge(b - 1));
    }
}

TEST_CASE("the p99 is the upper edge of its bucket: never below the true p99, at most a bucket above") {
    GapHistogram h;
    CHECK(h.quantile_ns(0.99) == 0);
    for (int i = 1; i <= 1000; ++i) h.add(uint64_t(i) * kMs / 10);  // 0.1 .. 100 ms, uniform
    const uint64_t p99 = h.quantile_ns(0.99);
    CHECK(p99 >= 99 * kMs);
    CHECK(p99 <= 99 * kMs * 5 / 4);
    GapHistogram one;
    one.add(7 * kMs);
    CHECK(one.quantile_ns(0.99) >= 7 * kMs);
    CHECK(one.quantile_ns(0.99) < 9 * kMs);
}

TEST_CASE("the histogram follows a change of rhythm: old gaps are forgotten by halving") {
    GapHistogram h;
    for (int i = 0; i < 5000; ++i) h.add(200 * kMs);
    CHECK(h.quantile_ns(0.99) >= 200 * kMs);
    for (int i = 0; i < 5000; ++i) h.add(1 * kMs);
    CHECK(h.held() < GapHistogram::kWindow);
    CHECK(h.added() == 10000);
    CHECK(h.quantile_ns(0.99) < 2 * kMs);
    // Weighted adds count as many gaps.
    GapHistogram w;
    w.add(3 * kMs, 500);
    CHECK(w.held() == 500);
    w.add(3 * kMs, 5000);
    CHECK(w.held() < GapHistogram::kWindow);
}

TEST_CASE("no baseline before the warm-up and kMinGaps gaps; the warm-up gaps do not count") {
    Sim s;
    // The first gaps are slow (connection setup, the first step): 2 s each, as many as the warm-up.
    s.issue();
    for (uint64_t i = 0; i < GapBaseline::kWarmupGaps; ++i) {
        s.issue();
        s.idle(2000);
        s.complete();
    }
    s.settle();
    CHECK(s.b.p99_ns() == 0);
    for (uint64_t i = 0; i + 1 < GapBaseline::kMinGaps; ++i) {
        s.issue();
        s.idle(150);
        s.complete();
        s.settle();
    }
    CHECK(s.b.p99_ns() == 0);  // one gap short
    s.issue();
    s.idle(150);
    s.complete();
    s.settle();
    const uint64_t p99 = s.b.p99_ns();
    CHECK(p99 >= 150 * kMs);
    CHECK(p99 < 400 * kMs);  // the 2 s warm-up gaps are not in it
}

TEST_CASE("many completions between two polls share the time between them") {
    Sim s;
    s.busy(400, 2.0);  // 2 ms apart: 50 per poll
    s.poll_until(s.t + 100 * kMs);
    const uint64_t p99 = s.b.p99_ns();
    CHECK(p99 >= 2 * kMs);
    CHECK(p99 < 5 * kMs);
}

TEST_CASE("a long gap is seen whole at poll resolution, even when fast completions follow it in the same poll") {
    Sim s;
    s.busy(300, 2.0);
    // 2 s without a completion (ops outstanding), then 40 quick ones within the next poll period.
    s.issue();
    s.issue();
    s.poll_until(s.t + 2000 * kMs);
    s.complete();
    for (int i = 0; i < 40; ++i) {
        s.issue();
        s.poll_until(s.t + kMs);
        s.complete();
    }
    s.complete();
    s.poll_until(s.t + 200 * kMs);
    // 1 gap of 2 s among ~340: p99 stays small, but the histogram holds a gap of about 2 s.
    const GapHistogram& h = s.b.histogram();
    CHECK(h.quantile_ns(1.0) >= 1900 * kMs);
    CHECK(h.quantile_ns(1.0) <= 2600 * kMs);
}

TEST_CASE("idle time with nothing outstanding is no gap") {
    Sim s;
    // A loop whose op takes 20 ms on the GPU after 480 ms of compute with nothing outstanding.
    for (int i = 0; i < 40; ++i) {
        s.op(20);
        s.idle(480);
    }
    const uint64_t p99 = s.b.p99_ns();
    INFO("p99 " << p99 / 1e6 << " ms");
    CHECK(p99 > 0);
    // At most a poll period more than the op itself (the part of a poll interval before the op was issued).
    CHECK(p99 <= 150 * kMs);

    // A 3 s pause with nothing outstanding among steady 20 ms ops changes nothing.
    const uint64_t before = s.b.p99_ns();
    s.idle(3000);
    for (int i = 0; i < 5; ++i) {
        s.op(20);
        s.idle(480);
    }
    CHECK(s.b.p99_ns() == before);
}

TEST_CASE("a slow but steady loop has a slow baseline") {
    Sim s;
    for (int i = 0; i < 40; ++i) s.op(400);  // always busy: each op issued as the previous completes
    const uint64_t p99 = s.b.p99_ns();
    CHECK(p99 >= 400 * kMs);
    CHECK(p99 <= 550 * kMs);
}

TEST_CASE("a reported gap (suspected or stalled) is left out; the same gap unreported counts") {
    for (bool reported : {false, true}) {
        Sim s;
        for (int i = 0; i < 60; ++i) s.op(50);
        s.issue();
        s.idle(6000);
        s.outlier = reported;
        s.complete();
        s.settle();
        s.outlier = false;
        const uint64_t max_gap = s.b.histogram().quantile_ns(1.0);
        if (reported)
            CHECK(max_gap < 200 * kMs);
        else
            CHECK(max_gap >= 6000 * kMs);
    }
}

TEST_CASE("completions without a new progress time end no gap; counters that go back start over") {
    Sim s;
    for (int i = 0; i < 30; ++i) s.op(100);
    s.settle();
    const uint64_t added = s.b.histogram().added();
    // Counted done without GPU evidence: ops_completed moves, t_last_progress_ns does not.
    s.issue();
    s.issue();
    s.poll_until(s.t + 300 * kMs);
    ++s.completed;
    s.poll_until(s.t + 300 * kMs);
    CHECK(s.b.histogram().added() == added);
    // The slot now holds another communicator: smaller counters and an older time.
    s.b.observe(s.t + 1, 1, 0, s.t - 5000 * kMs, false);
    s.b.observe(s.t + 2, 1, 1, s.t, false);
    CHECK(s.b.histogram().added() == added + 1);
}

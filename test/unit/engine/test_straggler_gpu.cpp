// Stragglers on GPUs, from in-collective GPU times (RankCommState::gpu_spans), on synthetic communicator views: each
// collective ends on every rank when the last one has arrived, so a rank's time inside it is the wait for the last
// arrival plus the work. Every rank's times are on a clock of its own, hours apart from the others'.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/straggler.h"
#include "ncclwatch/format.h"

using namespace ncw::verdict;

namespace {

constexpr double kMs = 1e6;  // ns

struct Job {
    int ranks = 4;
    int seqs = 64;
    double step_ms = 30;   // from one collective's start to the next one's
    double work_ms = 2;    // the collective itself, once every rank is in
    double jitter = 0.15;  // each rank's arrival varies by +- this share of the step, independently
    int late_rank = -1;    // this rank arrives late_ms late at every collective ...
    double late_ms = 0;
    int once_rank = -1;  // ... this one once_ms late at collective once_seq only (validation)
    int once_seq = 0;
    double once_ms = 0;
    unsigned seed = 1;
};

CommView make_view(const Job& j) {
    std::mt19937 rng(j.seed);
    std::uniform_real_distribution<double> u(-1, 1);
    CommView v;
    v.comm_id = 0x5a;
    v.nranks = j.ranks;
    for (int r = 0; r < j.ranks; ++r) {
        RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.host = "node" + std::to_string(r);
        s.pid = 100 + r;
        s.gpu_tracking = true;
        s.gpu_source = uint32_t(ncw::disk::GpuSource::Profiler);
        s.progress_exact = true;
        s.issued = s.reached = s.completed = uint64_t(j.seqs);
        s.clock_uncertainty_s = -1;                        // unknown: the rule must not need it
        s.clock_offset_ns = int64_t(r) * 977'000'000'000;  // and must not use it
        v.ranks.push_back(s);
    }
    double t = 0;
    for (int q = 1; q <= j.seqs; ++q) {
        t += j.step_ms;
        std::vector<double> arrive(size_t(j.ranks));
        for (int r = 0; r < j.ranks; ++r) {
            double a = t + u(rng) * j.jitter * j.step_ms;
            if (r == j.late_rank) a += j.late_ms;
            if (r == j.once_rank && q == j.once_seq) a += j.once_ms;
            arrive[size_t(r)] = a;
        }
        const double end = *std::max_element(arrive.begin(), arrive.end()) + j.work_ms;
        for (int r = 0; r < j.ranks; ++r) {
            GpuSpan g;
            g.seq = uint64_t(q);
            g.gpu_ns = uint64_t((end - arrive[size_t(r)]) * kMs);
            // Each rank's own clock: 1000 s + 3600 s per rank from the others'.
            g.t_end_ns = uint64_t((1000.0 + 3600.0 * r) * 1e9 + end * kMs);
            v.ranks[size_t(r)].gpu_spans.push_back(g);
            OpSig o;
            o.seq = uint64_t(q);
            o.op = uint8_t(ncw::disk::OpType::AllReduce);
            o.t_issue_ns = g.t_end_ns - g.gpu_ns;
            v.ranks[size_t(r)].recent.push_back(o);
        }
    }
    return v;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The number of milliseconds right after `label` in `text` (-1 when absent).
double ms_after(const std::string& text, const std::string& label) {
    const size_t at = text.find(label);
    return at == std::string::npos ? -1 : std::atof(text.c_str() + at + label.size());
}

}  // namespace

TEST_CASE("GPU straggler: one rank 20 ms late at every step of 4 is named with its lateness", "[straggler][gpu]") {
    Job j;
    j.late_rank = 2;
    j.late_ms = 20;
    const CommView v = make_view(j);
    const auto out = find_stragglers(v);
    REQUIRE(out.size() == 1);
    const Verdict& s = out[0];
    CHECK(s.kind == Kind::Straggler);
    CHECK(s.culprits == std::vector<int>{2});
    CHECK(s.seq == 64);
    CHECK(s.op.op == uint8_t(ncw::disk::OpType::AllReduce));
    INFO(s.summary);
    CHECK(contains(s.summary, "rank 2 (global 2, host node2) spent the least time inside"));
    CHECK(contains(s.summary, "a straggler, not a hang"));
    // Late by 20 ms, +- the others' jitter: the median of the others' wait minus its own.
    const double late = ms_after(s.summary, "arrives a median ");
    CHECK(late > 17);
    CHECK(late < 23);
    // 20 ms of a 30 ms step.
    const double share = ms_after(s.summary, "after the others, who wait that long inside each one: ");
    CHECK(share > 55);
    CHECK(share < 78);
    const double step = ms_after(s.summary, "of the step time (");
    CHECK(step > 27);
    CHECK(step < 33);
    REQUIRE(s.evidence.size() >= 3);
    CHECK(contains(s.evidence[0], "no clocks compared across ranks"));
    CHECK(contains(s.evidence[1], "shortest at 100% of them"));
}

TEST_CASE("GPU straggler: named within 16 steps, not before", "[straggler][gpu]") {
    Job j;
    j.late_rank = 1;
    j.late_ms = 20;
    j.seqs = 16;
    auto out = find_stragglers(make_view(j));
    REQUIRE(out.size() == 1);
    CHECK(out[0].culprits == std::vector<int>{1});
    j.seqs = 15;
    CHECK(find_stragglers(make_view(j)).empty());
}

TEST_CASE("GPU straggler: jitter alone names nobody", "[straggler][gpu]") {
    // +-15 % of the step on every rank, independently, at 2, 4 and 8 ranks, over windows of 16 to 64 collectives.
    size_t windows = 0;
    for (int ranks : {2, 4, 8})
        for (int seqs : {16, 24, 64})
            for (unsigned seed = 1; seed <= 150; ++seed) {
                Job j;
                j.ranks = ranks;
                j.seqs = seqs;
                j.seed = seed * 7919 + unsigned(ranks * 131 + seqs);
                const auto out = find_stragglers(make_view(j));
                INFO("ranks " << ranks << ", seqs " << seqs << ", seed " << j.seed);
                CHECK(out.empty());
                ++windows;
            }
    CHECK(windows == 1350);
}

TEST_CASE("GPU straggler: a rank late by little is not reported", "[straggler][gpu]") {
    SECTION("1 ms late every step, little jitter: below 2 ms") {
        Job j;
        j.jitter = 0.005;
        j.late_rank = 0;
        j.late_ms = 1;
        CHECK(find_stragglers(make_view(j)).empty());
    }
    SECTION("4 ms late at a 100 ms step: below 5 % of the step") {
        Job j;
        j.step_ms = 100;
        j.jitter = 0.005;
        j.late_rank = 3;
        j.late_ms = 4;
        CHECK(find_stragglers(make_view(j)).empty());
        j.late_ms = 6;  // above both: named
        const auto out = find_stragglers(make_view(j));
        REQUIRE(out.size() == 1);
        CHECK(out[0].culprits == std::vector<int>{3});
    }
}

TEST_CASE("GPU straggler: one long wait (validation on one rank) is not a straggler", "[straggler][gpu]") {
    Job j;
    j.once_rank = 0;
    j.once_seq = 40;
    j.once_ms = 15000;  // the others wait 15 s in #40
    CHECK(find_stragglers(make_view(j)).empty());
}

TEST_CASE("GPU straggler: what the GPU rule needs", "[straggler][gpu]") {
    Job j;
    j.late_rank = 2;
    j.late_ms = 20;
    SECTION("every rank of the communicator visible") {
        CommView v = make_view(j);
        v.ranks.erase(v.ranks.begin() + 3);  // rank 3's file is missing: the shortest may wait less for it
        CHECK(find_stragglers(v).empty());
    }
    SECTION("GPU times on every rank: a rank without them leaves no common seq, and issue times are not used") {
        CommView v = make_view(j);
        v.ranks[0].gpu_spans.clear();
        CHECK(find_stragglers(v).empty());
    }
    SECTION("a gap in the seqs (ops the profiler did not time) still leaves a step time") {
        CommView v = make_view(j);
        for (auto& r : v.ranks)
            r.gpu_spans.erase(
                std::remove_if(r.gpu_spans.begin(), r.gpu_spans.end(), [](const GpuSpan& g) { return g.seq % 3 == 0; }),
                r.gpu_spans.end());
        const auto out = find_stragglers(v);
        REQUIRE(out.size() == 1);
        CHECK(out[0].culprits == std::vector<int>{2});
    }
}

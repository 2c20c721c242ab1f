// Stragglers on GPUs, from in-collective GPU times (RankCommState::gpu_spans), on synthetic communicator views: each
// collective ends on every rank when the last one has arrived, so a rank's time inside it is the wait for the last
// arrival plus the work. Every rank's times are on a clock of its own, hours apart from the others'.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
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

TEST_CASE(
    "GPU straggler: the same rank in two windows of 12 steps (three of 16 at 2 ranks): within 50 steps, not "
    "before",
    "[straggler][gpu]") {
    Job j;
    j.late_rank = 1;
    j.late_ms = 20;
    for (const auto& [ranks, steps, window] : {std::tuple{4, 24, 12}, std::tuple{2, 48, 16}}) {
        j.ranks = ranks;
        j.seqs = steps;
        auto out = find_stragglers(make_view(j));
        REQUIRE(out.size() == 1);
        CHECK(out[0].culprits == std::vector<int>{1});
        CHECK(contains(out[0].evidence[1],
                       "in each of " + std::to_string(steps / window) + " windows of " + std::to_string(window)));
        j.seqs = steps - 1;
        CHECK(find_stragglers(make_view(j)).empty());
    }
}

TEST_CASE("GPU straggler: a rank shortest in one window and another in the next is nobody", "[straggler][gpu]") {
    // Rank 0 late over the first 16 collectives, rank 1 over the next 16 (the culprit flipping within one run).
    Job a;
    a.seqs = 32;
    a.late_rank = 0;
    a.late_ms = 20;
    CommView v = make_view(a);
    Job b = a;
    b.late_rank = 1;
    const CommView w = make_view(b);
    for (size_t r = 0; r < v.ranks.size(); ++r)
        for (size_t k = 16; k < 32; ++k) v.ranks[r].gpu_spans[k] = w.ranks[r].gpu_spans[k];
    CHECK(find_stragglers(v).empty());
}

TEST_CASE("GPU straggler: late because its op on another communicator ended later is not its own doing",
          "[straggler][gpu]") {
    // Two ranks in a tensor-parallel communicator, each also in a data-parallel one (its peers there not shown). Before
    // each tensor-parallel op, rank 1's data-parallel op ends 15 ms after rank 0's (its data-parallel peer is slower),
    // then rank 0 computes 5 ms and rank 1 5 + extra_ms: rank 1 arrives 15 + extra_ms late every time.
    const auto at = [](double ms) { return uint64_t(ms * kMs); };
    struct Grid {
        CommView tp, dp;
    };
    const auto grid = [&](double extra_ms) {
        Grid g;
        g.tp.comm_id = 0x7;
        g.dp.comm_id = 0x8;
        g.tp.nranks = 2;
        g.dp.nranks = 4;
        for (int r = 0; r < 2; ++r) {
            RankCommState s;
            s.comm_rank = s.global_rank = r;
            s.file = "rank" + std::to_string(r) + ".ncw";
            s.gpu_tracking = true;
            s.gpu_source = uint32_t(ncw::disk::GpuSource::Profiler);
            s.progress_exact = true;
            g.tp.ranks.push_back(s);
            g.dp.ranks.push_back(s);
        }
        for (int q = 1; q <= 64; ++q) {
            const double t = 1000 + 60.0 * q;
            const double dp_end[2] = {t, t + 15};                    // each rank's data-parallel op ends here
            const double start[2] = {t + 5, t + 15 + 5 + extra_ms};  // then it computes
            const double end = start[1] + 2;                         // the op ends 2 ms after the last arrival
            for (int r = 0; r < 2; ++r) {
                GpuSpan d;
                d.seq = uint64_t(q);
                d.t_end_ns = at(dp_end[r]);
                d.gpu_ns = at(3);
                g.dp.ranks[size_t(r)].gpu_spans.push_back(d);
                GpuSpan s;
                s.seq = uint64_t(q);
                s.t_end_ns = at(end);
                s.gpu_ns = at(end - start[r]);
                g.tp.ranks[size_t(r)].gpu_spans.push_back(s);
            }
        }
        return g;
    };
    const Grid g = grid(0);
    const std::vector<const CommView*> job{&g.tp, &g.dp};
    CHECK(find_stragglers(g.tp, {}, &job).empty());
    // Without the other communicator, rank 1 is 15 ms late at every op.
    const auto out = find_stragglers(g.tp);
    REQUIRE(out.size() == 1);
    CHECK(out[0].culprits == std::vector<int>{1});

    // Rank 1 also computes 20 ms longer: that much is its own doing, and counted.
    const Grid slow = grid(20);
    const std::vector<const CommView*> slow_job{&slow.tp, &slow.dp};
    const auto own = find_stragglers(slow.tp, {}, &slow_job);
    REQUIRE(own.size() == 1);
    CHECK(own[0].culprits == std::vector<int>{1});
    CHECK(ms_after(own[0].summary, "arrives a median ") == Approx(20).margin(0.5));
    INFO(own[0].evidence[2]);
    CHECK(contains(own[0].evidence[2], "(less at 48 of 48 ops: a wait in another communicator"));
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

// ---- A pipeline's stages, from the GPU times of their sends and receives (issue 41) ----

namespace {

// A 4-stage pipeline (forward from rank - 1 to rank + 1, gradients back) whose stage `slow` computes `late_ms` longer
// before its forward send: the medians each rank's profiler gives of its receives from each neighbour, as the test
// NCCL measured them (its receives from the slow stage, and the first stage's gradients, wait for it; the others'
// take a millisecond).
CommView pipeline(int slow, double late_ms, size_t timed = 32) {
    CommView v;
    v.comm_id = 0x77;
    v.nranks = 4;
    for (int r = 0; r < 4; ++r) {
        RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.pid = 400 + r;
        s.p2p_known = true;
        for (int q : {r - 1, r + 1}) {
            if (q < 0 || q > 3) continue;
            PeerP2p e;
            e.peer = q;
            // Waits for the slow stage directly (its receive from it), or for the chain through it (the first
            // stages' gradients, which come back only after the slow stage's forward).
            const bool waits = slow >= 0 && (q == slow || (q > r && r < slow));
            e.recvs_gpu_ns = uint64_t((waits ? late_ms : 0.0) * kMs + 1.0 * kMs);
            e.recvs_gpu_timed = timed;
            s.p2p.push_back(e);
        }
        v.ranks.push_back(s);
    }
    return v;
}

}  // namespace

TEST_CASE("p2p straggler: the pipeline stage its peers wait for inside their receives is named", "[straggler]") {
    auto vs = find_stragglers(pipeline(2, 20.0));
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::Straggler);
    CHECK(vs[0].culprits == std::vector<int>{2});
    CHECK(vs[0].op.op == uint8_t(ncw::disk::OpType::Recv));
    CHECK(vs[0].summary.find("its peers wait a median of 21.0 ms on their GPUs inside each receive from rank 2") !=
          std::string::npos);
    // The first stage as the slow one: nobody receives from before it, its successor and the gradients wait.
    vs = find_stragglers(pipeline(1, 20.0));
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].culprits == std::vector<int>{1});
}

TEST_CASE("p2p straggler: a pipeline in step, few timed receives, or a stage out of sight names nobody",
          "[straggler]") {
    CHECK(find_stragglers(pipeline(-1, 0.0)).empty());
    CHECK(find_stragglers(pipeline(2, 1.0)).empty());      // 1 ms: under gpu_min_lateness_s
    CHECK(find_stragglers(pipeline(2, 20.0, 4)).empty());  // medians of 4 receives prove nothing
    auto v = pipeline(2, 20.0);
    v.ranks.erase(v.ranks.begin() + 3);  // the last stage's file is not here: it may be the slow one
    CHECK(find_p2p_stragglers(v).empty());
}

TEST_CASE("p2p straggler: the stage before the slow one passes its wait on and is not a rival", "[straggler]") {
    // Measured at two nodes on one H200 (examples/hang_scenarios.py pipeline_slow, stage 2 slow by 20 ms), the
    // medians after the end, in ms, of each rank's receives from each neighbour. Stage 1 waits 41 ms on stage 2 and
    // stage 0 waits 55 ms on stage 1 for it: taken as the median of its own waits (28.4 ms), stage 1 looked late by
    // 14.8 ms against stage 2's 28.1 ms, and nobody was named.
    const std::map<int, std::map<int, double>> measured = {
        {0, {{1, 54.74}}}, {1, {{2, 40.97}, {0, 15.82}}}, {2, {{1, 31.6}, {3, 11.78}}}, {3, {{2, 58.64}}}};
    CommView v;
    v.comm_id = 0x78;
    v.nranks = 4;
    for (const auto& [r, from] : measured) {
        RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.pid = 500 + r;
        s.p2p_known = true;
        for (const auto& [q, ms] : from) {
            PeerP2p e;
            e.peer = q;
            e.recvs_gpu_ns = uint64_t(ms * kMs);
            e.recvs_gpu_timed = 32;
            s.p2p.push_back(e);
        }
        v.ranks.push_back(s);
    }
    const auto vs = find_stragglers(v);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].culprits == std::vector<int>{2});
    CHECK(vs[0].summary.find("which waits at most 31.6 ms inside its own from any one peer") != std::string::npos);
}

TEST_CASE("p2p straggler: two ranks that only exchange with each other differ by noise, not a straggler",
          "[straggler]") {
    // Measured in a hung send cycle (examples/hang_scenarios.py send_cycle): ranks 0 and 1 each received from the
    // other only, for 118 and 126 ms; rank 1 "held up" rank 0 by 8 ms more than the reverse, out of 126.
    CommView v;
    v.comm_id = 0x79;
    v.nranks = 2;
    for (int r = 0; r < 2; ++r) {
        RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.p2p_known = true;
        PeerP2p e;
        e.peer = 1 - r;
        e.recvs_gpu_ns = uint64_t((r == 0 ? 126.30 : 118.18) * kMs);
        e.recvs_gpu_timed = 32;
        s.p2p.push_back(e);
        v.ranks.push_back(s);
    }
    CHECK(find_p2p_stragglers(v).empty());
    v.ranks[0].p2p[0].recvs_gpu_ns = uint64_t(126.30 * 3 * kMs);  // rank 1 holds rank 0 up three times as long
    const auto vs = find_p2p_stragglers(v);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].culprits == std::vector<int>{1});
}

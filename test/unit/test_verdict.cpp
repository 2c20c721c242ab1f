// The verdict engine on hand-built communicator views: one scenario per entry of the field notes' failure catalogue.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/verdict.h"
#include "ncclwatch/format.h"

using namespace ncw::verdict;
using ncw::disk::OpType;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint64_t kNow = 10'000 * kSec;
constexpr double kTimeout = 10.0;
constexpr uint64_t kComm = 0x1234abcdull;
constexpr uint8_t kFloat32 = 7;  // ncclFloat32
constexpr int32_t kSum = 0;      // ncclSum

uint64_t ago(double s) { return kNow - uint64_t(s * double(kSec)); }

OpSig sig(uint64_t seq, OpType op = OpType::AllReduce, uint64_t count = 1048576, int32_t root = -1,
          int32_t redop = kSum, uint8_t dtype = kFloat32) {
    OpSig s;
    s.seq = seq;
    s.op = uint8_t(op);
    s.dtype = dtype;
    s.count = count;
    s.root = root;
    s.redop = redop;
    s.tid = 7;
    s.stream = 0x7f00;
    return s;
}

// A rank that completed everything it issued (#done), last issue `idle_for` seconds ago.
RankCommState idle(int r, uint64_t done, double idle_for = 20.0) {
    RankCommState s;
    s.comm_rank = r;
    s.global_rank = r;
    s.host = "node0";
    s.pid = 1000 + r;
    s.gpu_tracking = true;
    s.issued = s.reached = s.completed = done;
    s.t_last_issue_ns = s.t_last_progress_ns = ago(idle_for + 0.5);
    for (uint64_t q = done > 3 ? done - 3 : 1; q <= done; ++q) {
        s.recent.push_back(sig(q));
        s.recent.back().t_issue_ns = ago(idle_for + 1.0 + double(done - q));
    }
    return s;
}

// A rank whose GPU is inside #(done+1) (issued up to `issued`) for `for_s` seconds; stall_since_ns set.
RankCommState waiting(int r, uint64_t done, double for_s, uint64_t issued = 0) {
    RankCommState s = idle(r, done, for_s + 1.0);
    s.issued = issued ? issued : done + 1;
    s.reached = done + 1;
    for (uint64_t q = done + 1; q <= s.issued; ++q) {
        s.recent.push_back(sig(q));
        s.recent.back().t_issue_ns = ago(for_s);
    }
    s.t_last_issue_ns = ago(for_s);
    s.stall_since_ns = ago(for_s);
    return s;
}

CommView view(int nranks, std::vector<RankCommState> ranks) {
    CommView v;
    v.comm_id = kComm;
    v.nranks = nranks;
    v.ranks = std::move(ranks);
    return v;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

const Verdict* find_kind(const std::vector<Verdict>& vs, Kind k) {
    auto it = std::find_if(vs.begin(), vs.end(), [k](const Verdict& v) { return v.kind == k; });
    return it == vs.end() ? nullptr : &*it;
}

using Ranks = std::vector<int>;

}  // namespace

TEST_CASE("verdict: names and op descriptions", "[verdict]") {
    CHECK(std::string(kind_name(Kind::NotJoined)) == "NOT_JOINED");
    CHECK(std::string(kind_name(Kind::GpuNotReached)) == "GPU_NOT_REACHED");
    CHECK(std::string(kind_name(Kind::StuckInNccl)) == "STUCK_IN_NCCL");
    CHECK(std::string(kind_name(Kind::Mismatch)) == "MISMATCH");
    CHECK(std::string(kind_name(Kind::Dead)) == "DEAD");
    CHECK(std::string(kind_name(Kind::AsyncError)) == "ASYNC_ERROR");
    CHECK(std::string(kind_name(Kind::Unknown)) == "UNKNOWN");

    CHECK(describe_op(sig(42)) == "AllReduce #42 (float32, 1048576 elements, sum, stream 0x7f00, tid 7)");
    CHECK(describe_op(sig(5, OpType::Broadcast, 10, 3)) ==
          "Broadcast #5 (float32, 10 elements, root 3, stream 0x7f00, tid 7)");
    CHECK(describe_op(sig(6, OpType::AllGather, 1, -1, 2)) ==
          "AllGather #6 (float32, 1 element, stream 0x7f00, tid 7)");
    OpSig none;
    none.seq = 9;
    CHECK(describe_op(none) == "#9 (signature not recorded)");
}

TEST_CASE("verdict: a healthy communicator has no verdict", "[verdict]") {
    SECTION("all idle") {
        auto v = view(4, {idle(0, 42), idle(1, 42), idle(2, 42), idle(3, 42)});
        CHECK(diagnose_stall(v, kNow, kTimeout).empty());
        CHECK(find_mismatches(v).empty());
    }
    SECTION("all inside an op, below the timeout") {
        auto v = view(4, {waiting(0, 41, 5.0), waiting(1, 41, 5.0), idle(2, 41), waiting(3, 41, 9.9)});
        CHECK(diagnose_stall(v, kNow, kTimeout).empty());
    }
    SECTION("a long compute phase before the op is not waiting") {
        // No stall_since: last progress 100 s ago, but #42 was issued only 1 s ago.
        auto r0 = waiting(0, 41, 1.0);
        r0.stall_since_ns = 0;
        r0.t_last_progress_ns = ago(100.0);
        auto v = view(2, {r0, idle(1, 41)});
        CHECK(diagnose_stall(v, kNow, kTimeout).empty());
    }
    SECTION("empty view") { CHECK(diagnose_stall(view(0, {}), kNow, kTimeout).empty()); }
}

TEST_CASE("verdict: rank 2 of 4 skipped #42", "[verdict]") {
    auto v = view(4, {waiting(0, 41, 12.3), waiting(1, 41, 12.0), idle(2, 41, 15.0), waiting(3, 41, 11.0)});
    auto vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    const auto& d = vs[0];
    CHECK(d.kind == Kind::NotJoined);
    CHECK(d.comm_id == kComm);
    CHECK(d.seq == 42);
    CHECK(d.culprits == Ranks{2});
    CHECK(d.waiting == Ranks{0, 1, 3});
    CHECK(d.missing.empty());
    CHECK(d.stalled_for_s == Approx(12.3).margin(0.01));
    CHECK(d.op.seq == 42);
    CHECK(d.op.op == uint8_t(OpType::AllReduce));
    CHECK(contains(d.summary,
                   "comm 0x000000001234abcd: 3 of 4 ranks wait in AllReduce #42 (float32, 1048576 "
                   "elements, sum) for 12.3 s"));
    CHECK(contains(d.summary, "rank 2 is behind: completed #41, never issued #42"));
    CHECK(contains(d.summary, "last issued AllReduce #41"));
    CHECK(contains(d.summary, "15.5 s ago"));
    // One evidence line per rank, plus the hint.
    auto has_line = [&](const std::string& s) {
        return std::any_of(d.evidence.begin(), d.evidence.end(), [&](const std::string& e) { return contains(e, s); });
    };
    CHECK(has_line("rank 0 (global 0, host node0, pid 1000): issued #42, reached #42, completed #41, waiting 12.3 s"));
    CHECK(has_line("rank 2 (global 2, host node0, pid 1002): issued #41, reached #41, completed #41, idle"));
}

TEST_CASE("verdict: the rank that is behind is dead", "[verdict]") {
    auto r2 = idle(2, 41, 15.0);
    r2.alive = false;
    r2.heartbeat_age_s = 30.0;

    SECTION("killed") {
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0), r2, waiting(3, 41, 12.0)}), kNow,
                                 kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(vs[0].waiting == Ranks{0, 1, 3});
        CHECK(contains(vs[0].summary, "rank 2 is gone (killed?"));
        CHECK(contains(vs[0].summary, "after its last op AllReduce #41"));
        CHECK(contains(vs[0].summary, "never issued #42"));
        CHECK(find_kind(vs, Kind::NotJoined) == nullptr);  // dead, not merely behind
    }
    SECTION("exited cleanly (uneven data, no drop_last)") {
        r2.exited_clean = true;
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0), r2, waiting(3, 41, 12.0)}), kNow,
                                 kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(contains(vs[0].summary, "rank 2 exited cleanly (exit handlers ran) after its last op AllReduce #41"));
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "drop_last=True"); }));
    }
    SECTION("died inside the op") {
        auto r = waiting(2, 41, 12.0);
        r.alive = false;
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0), r, waiting(3, 41, 12.0)}), kNow,
                                 kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].seq == 42);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(vs[0].waiting == Ranks{0, 1, 3});
        CHECK(contains(vs[0].summary, "inside #42"));
    }
    SECTION("one dead, one alive but behind: both named") {
        auto vs =
            diagnose_stall(view(4, {waiting(0, 41, 12.0), idle(1, 41), r2, waiting(3, 41, 12.0)}), kNow, kTimeout);
        REQUIRE(vs.size() == 2);
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(vs[1].kind == Kind::NotJoined);
        CHECK(vs[1].culprits == Ranks{1});
    }
}

TEST_CASE("verdict: a rank's GPU has not reached the op", "[verdict]") {
    auto r1 = waiting(1, 41, 12.0);
    r1.reached = 41;  // issued #42, but its stream is still busy with earlier work
    auto vs =
        diagnose_stall(view(4, {waiting(0, 41, 12.0), r1, waiting(2, 41, 12.0), waiting(3, 41, 12.0)}), kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::GpuNotReached);
    CHECK(vs[0].seq == 42);
    CHECK(vs[0].culprits == Ranks{1});
    CHECK(vs[0].waiting == Ranks{0, 2, 3});
    CHECK(contains(vs[0].summary, "rank 1's GPU has not reached #42 (busy with earlier work on its stream)"));
}

TEST_CASE("verdict: a lone rank's GPU stays busy before its collective past the timeout", "[verdict]") {
    // A one-rank communicator (or a rank whose peers are elsewhere): nobody waits inside NCCL, but the op has not
    // been reached for longer than the timeout.
    auto r0 = waiting(0, 44, 12.0, 84);
    r0.reached = 44;
    auto vs = diagnose_stall(view(1, {r0}), kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::GpuNotReached);
    CHECK(vs[0].seq == 45);
    CHECK(vs[0].culprits == Ranks{0});
    CHECK(vs[0].stalled_for_s >= 12.0);
    // Below the timeout it is only busy.
    auto r1 = waiting(0, 44, 1.0, 84);
    r1.reached = 44;
    CHECK(diagnose_stall(view(1, {r1}), kNow, kTimeout).empty());
}

// NCCLWATCH_GPU_SAMPLE=auto: ops from `first` to the rank's last issued carried no GPU events of their own.
void sampled_out_from(RankCommState& r, uint64_t first) {
    for (auto& g : r.recent)
        if (g.seq >= first) g.flags |= ncw::disk::kFlagSampledOut;
}

TEST_CASE("verdict: an op without GPU events of its own is not called unreached", "[verdict][sampling]") {
    SECTION("a lone rank: stuck, with the reach unknown, not GPU_NOT_REACHED") {
        auto r0 = waiting(0, 44, 12.0);
        r0.reached = 44;
        sampled_out_from(r0, 45);
        auto vs = diagnose_stall(view(1, {r0}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
        CHECK(vs[0].seq == 45);
        CHECK(contains(vs[0].summary, "or rank 0 busy with earlier work on its stream"));
        CHECK(contains(vs[0].evidence.front(), "NCCLWATCH_GPU_SAMPLE"));
    }
    SECTION("the same op with its own events, not reached: GPU_NOT_REACHED") {
        auto r0 = waiting(0, 44, 12.0);
        r0.reached = 44;
        auto vs = diagnose_stall(view(1, {r0}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::GpuNotReached);
    }
}

TEST_CASE("verdict: a peer's completion of an all-reduce proves unsampled ops done", "[verdict][sampling]") {
    // Ranks 0 and 1 issued #40..#42 while a sampled op was in flight: their GPUs did #40 and #41, but nothing
    // recorded after them completed, since #42 hangs (rank 2 never issued it). Rank 2 completed #41: so did they.
    auto r0 = waiting(0, 39, 12.0, 42);
    auto r1 = waiting(1, 39, 12.0, 42);
    for (auto* r : {&r0, &r1}) {
        r->reached = 39;
        sampled_out_from(*r, 40);
    }
    auto vs = diagnose_stall(view(3, {r0, r1, idle(2, 41)}), kNow, kTimeout);
    REQUIRE(!vs.empty());
    CHECK(vs[0].kind == Kind::NotJoined);
    CHECK(vs[0].seq == 42);
    CHECK(vs[0].culprits == Ranks{2});
    CHECK(vs[0].waiting == Ranks{0, 1});
    bool noted = false;
    for (const auto& e : vs[0].evidence) noted |= contains(e, "#40..#41 not completed on record");
    CHECK(noted);

    SECTION("not for a rooted op: a broadcast can complete on its root before the others joined") {
        auto b0 = r0, b1 = r1;
        auto b2 = idle(2, 41);
        for (auto* r : {&b0, &b1, &b2})
            for (auto& g : r->recent)
                if (g.seq == 41) g.op = uint8_t(OpType::Broadcast), g.root = 2;
        auto bs = diagnose_stall(view(3, {b0, b1, b2}), kNow, kTimeout);
        REQUIRE(!bs.empty());
        CHECK(bs[0].seq == 41);
    }
    SECTION("also over an op with events of its own: a process gone before its poller saw them") {
        auto c0 = r0;
        for (auto& g : c0.recent) g.flags = 0;
        c0.alive = false;  // died right after its GPU finished #41; rank 2's completion of #41 proves it
        auto cs = diagnose_stall(view(3, {c0, r1, idle(2, 41)}), kNow, kTimeout);
        REQUIRE(!cs.empty());
        CHECK(cs[0].seq == 42);
    }
    SECTION("not past an op whose signature differs on the peer") {
        auto d2 = idle(2, 41);
        for (auto& g : d2.recent)
            if (g.seq == 41) g.count = 7;
        auto ds = diagnose_stall(view(3, {r0, r1, d2}), kNow, kTimeout);
        REQUIRE(!ds.empty());
        CHECK(ds[0].seq == 41);  // #40 proven, #41 not
    }
}

TEST_CASE("verdict: every rank inside the op, none completes", "[verdict]") {
    SECTION("all ranks visible: stuck inside NCCL") {
        auto vs = diagnose_stall(
            view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0), waiting(2, 41, 12.0), waiting(3, 41, 30.0)}), kNow,
            kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
        CHECK(vs[0].culprits.empty());
        CHECK(vs[0].waiting == Ranks{0, 1, 2, 3});
        CHECK(vs[0].stalled_for_s == Approx(30.0).margin(0.01));
        CHECK(contains(vs[0].summary, "all 4 ranks are inside #42; none completed: stuck inside NCCL (transport?)"));
    }
    SECTION("no GPU tracking counts as reached") {
        std::vector<RankCommState> rs;
        for (int r = 0; r < 2; ++r) {
            rs.push_back(waiting(r, 41, 12.0));
            rs.back().gpu_tracking = false;
            rs.back().reached = 0;
        }
        auto vs = diagnose_stall(view(2, rs), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
    }
    SECTION("ranks missing: the culprit is not visible from here") {
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].culprits == Ranks{2, 3});
        CHECK(vs[0].missing == Ranks{2, 3});
        CHECK(vs[0].waiting == Ranks{0, 1});
        CHECK(contains(vs[0].summary, "2 of 4 ranks wait in AllReduce #42"));
        CHECK(contains(vs[0].summary, "ranks 2,3 not visible from here"));
    }
    SECTION("ranks missing but a visible culprit: named, missing still listed") {
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), idle(1, 41)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{1});
        CHECK(vs[0].missing == Ranks{2, 3});
    }
}

TEST_CASE("verdict: how the start of a wait is found", "[verdict]") {
    SECTION("from the last progress when the issue time is unknown") {
        auto r0 = waiting(0, 41, 0.0, 43);  // two ops in flight: the last issue says nothing about #42
        r0.stall_since_ns = 0;
        r0.recent.clear();
        r0.t_last_progress_ns = ago(50.0);
        r0.t_last_issue_ns = ago(1.0);
        auto vs = diagnose_stall(view(2, {r0, idle(1, 41)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].stalled_for_s == Approx(50.0).margin(0.01));
        CHECK(contains(vs[0].summary, "#42 (signature not recorded)"));
    }
    SECTION("from the issue time of completed+1") {
        auto r0 = waiting(0, 41, 0.0);
        r0.stall_since_ns = 0;
        r0.t_last_progress_ns = ago(80.0);
        for (auto& s : r0.recent)
            if (s.seq == 42) s.t_issue_ns = ago(25.0);
        auto vs = diagnose_stall(view(2, {r0, idle(1, 41)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].stalled_for_s == Approx(25.0).margin(0.01));
    }
}

TEST_CASE("verdict: signature mismatches", "[verdict]") {
    auto with = [](RankCommState r, const OpSig& s) {
        for (auto& x : r.recent)
            if (x.seq == s.seq) x = s;
        return r;
    };

    SECTION("count, 3 vs 1: the odd rank is named") {
        auto v =
            view(4, {idle(0, 42), with(idle(1, 42), sig(42, OpType::AllReduce, 524288)), idle(2, 42), idle(3, 42)});
        auto ms = find_mismatches(v);
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].kind == Kind::Mismatch);
        CHECK(ms[0].seq == 42);
        CHECK(ms[0].culprits == Ranks{1});
        CHECK(ms[0].op.count == 1048576);
        CHECK(ms[0].summary ==
              "comm 0x000000001234abcd: MISMATCH at #42: rank 1 issued AllReduce (float32, 524288 elements, sum) but "
              "ranks 0,2,3 issued AllReduce (float32, 1048576 elements, sum)");
        CHECK(std::find(ms[0].evidence.begin(), ms[0].evidence.end(),
                        "count: ranks 0,2,3 = 1048576; rank 1 = 524288") != ms[0].evidence.end());
        CHECK(std::none_of(ms[0].evidence.begin(), ms[0].evidence.end(),
                           [](const std::string& e) { return contains(e, "dtype:") || contains(e, "op:"); }));
    }
    SECTION("op") {
        auto v =
            view(4, {idle(0, 42), idle(1, 42), idle(2, 42), with(idle(3, 42), sig(42, OpType::Broadcast, 1048576, 0))});
        auto ms = find_mismatches(v);
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{3});
        CHECK(contains(ms[0].summary, "rank 3 issued Broadcast (float32, 1048576 elements, root 0)"));
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(),
                          [](const std::string& e) { return e == "op: ranks 0,1,2 = AllReduce; rank 3 = Broadcast"; }));
    }
    SECTION("root counts only for rooted ops") {
        auto bc = [](int root) { return sig(42, OpType::Broadcast, 100, root); };
        auto v = view(3, {with(idle(0, 42), bc(0)), with(idle(1, 42), bc(0)), with(idle(2, 42), bc(1))});
        auto ms = find_mismatches(v);
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{2});
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(),
                          [](const std::string& e) { return e == "root: ranks 0,1 = 0; rank 2 = 1"; }));

        auto ar = [](int root) { return sig(42, OpType::AllReduce, 100, root); };
        auto v2 = view(3, {with(idle(0, 42), ar(-1)), with(idle(1, 42), ar(0)), with(idle(2, 42), ar(5))});
        CHECK(find_mismatches(v2).empty());
    }
    SECTION("redop ignored for AllGather, compared for AllReduce") {
        auto ag = [](int32_t redop) { return sig(42, OpType::AllGather, 100, -1, redop); };
        CHECK(find_mismatches(view(2, {with(idle(0, 42), ag(0)), with(idle(1, 42), ag(3))})).empty());

        auto ar = [](int32_t redop) { return sig(42, OpType::AllReduce, 100, -1, redop); };
        auto ms =
            find_mismatches(view(3, {with(idle(0, 42), ar(0)), with(idle(1, 42), ar(0)), with(idle(2, 42), ar(2))}));
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{2});
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(),
                          [](const std::string& e) { return e == "redop: ranks 0,1 = sum; rank 2 = max"; }));
    }
    SECTION("dtype") {
        auto ms = find_mismatches(
            view(3, {idle(0, 42), idle(1, 42), with(idle(2, 42), sig(42, OpType::AllReduce, 1048576, -1, kSum, 9))}));
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{2});
        CHECK(contains(ms[0].summary, "rank 2 issued AllReduce (bfloat16, 1048576 elements, sum)"));
    }
    SECTION("1 vs 1: both named, no one blamed arbitrarily") {
        auto ms = find_mismatches(view(2, {idle(0, 42), with(idle(1, 42), sig(42, OpType::AllReduce, 7))}));
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{0, 1});
        CHECK(contains(ms[0].summary, "ranks disagree"));
        CHECK(contains(ms[0].summary, "rank 0 issued AllReduce (float32, 1048576 elements, sum)"));
        CHECK(contains(ms[0].summary, "rank 1 issued AllReduce (float32, 7 elements, sum)"));
    }
    SECTION("several sequence numbers: one verdict each, sorted by seq") {
        auto r1 = with(with(idle(1, 42), sig(42, OpType::AllReduce, 5)), sig(40, OpType::AllReduce, 6));
        auto ms = find_mismatches(view(3, {idle(0, 42), r1, idle(2, 42)}));
        REQUIRE(ms.size() == 2);
        CHECK(ms[0].seq == 40);
        CHECK(ms[1].seq == 42);
    }
    SECTION("a seq only one rank recorded is not compared") {
        auto r0 = idle(0, 42);
        r0.recent.push_back(sig(43, OpType::Broadcast, 1, 0));
        CHECK(find_mismatches(view(2, {r0, idle(1, 42)})).empty());
    }
    SECTION("a stall reports a mismatch at the seq it waits in") {
        auto r3 = waiting(3, 41, 12.0);
        r3 = with(r3, sig(42, OpType::AllReduce, 524288));
        auto vs = diagnose_stall(view(4, {waiting(0, 41, 12.0), waiting(1, 41, 12.0), waiting(2, 41, 12.0), r3}), kNow,
                                 kTimeout);
        const Verdict* m = find_kind(vs, Kind::Mismatch);
        REQUIRE(m);
        CHECK(m->seq == 42);
        CHECK(m->culprits == Ranks{3});
        CHECK(m->waiting == Ranks{0, 1, 2, 3});
        CHECK(find_kind(vs, Kind::StuckInNccl));
    }
}

TEST_CASE("verdict: NCCL reported an asynchronous error", "[verdict]") {
    auto r1 = waiting(1, 41, 12.0);
    r1.async_error = 6;  // ncclRemoteError
    auto vs =
        diagnose_stall(view(4, {waiting(0, 41, 12.0), r1, waiting(2, 41, 12.0), waiting(3, 41, 12.0)}), kNow, kTimeout);
    REQUIRE(vs.size() == 2);
    CHECK(vs[0].kind == Kind::AsyncError);
    CHECK(vs[0].culprits == Ranks{1});
    CHECK(vs[0].seq == 42);
    CHECK(contains(vs[0].summary, "ncclRemoteError"));
    CHECK(vs[1].kind == Kind::StuckInNccl);  // the search goes on

    SECTION("ncclInProgress (a nonblocking comm with work in flight) is not an error") {
        r1.async_error = 7;
        auto vs2 = diagnose_stall(view(4, {waiting(0, 41, 12.0), r1, waiting(2, 41, 12.0), waiting(3, 41, 12.0)}), kNow,
                                  kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::StuckInNccl);
    }
}

TEST_CASE("verdict: a minority ahead of an idle majority", "[verdict]") {
    // Rank 3 issued one all_reduce more (gradient accumulation out of step) and waits in #43; ranks 0-2 completed #42
    // and are idle. The culprit is the rank that is ahead, not the majority that looks "behind".
    auto v = view(4, {idle(0, 42), idle(1, 42), idle(2, 42), waiting(3, 42, 40.0)});
    auto vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::ExtraOp);
    CHECK(vs[0].seq == 43);
    CHECK(vs[0].waiting == Ranks{3});
    CHECK(vs[0].culprits == Ranks{3});
    CHECK(contains(vs[0].summary,
                   "rank 3 issued AllReduce #43 (float32, 1048576 elements, sum) that no other rank issued (3 ranks "
                   "completed #42 and issued nothing more)"));
    CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
        return contains(e, "ranks 0,1,2 completed every op they issued (#42)");
    }));

    SECTION("the majority behind is not the smallest group: 5 at rest, 3 ahead") {
        auto v2 = view(8, {idle(0, 42), waiting(1, 42, 30.0), idle(2, 42), waiting(3, 42, 31.0), idle(4, 42),
                           idle(5, 42), waiting(6, 42, 29.0), idle(7, 42)});
        auto vs2 = diagnose_stall(v2, kNow, kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::ExtraOp);
        CHECK(vs2[0].culprits == Ranks{1, 3, 6});
        CHECK(contains(vs2[0].summary, "ranks 1,3,6 issued AllReduce #43"));
        CHECK(contains(vs2[0].summary, "(5 ranks completed #42 and issued nothing more)"));
    }
    SECTION("the others finished and exited cleanly") {
        auto r0 = idle(0, 42), r1 = idle(1, 42);
        r0.alive = r1.alive = false;
        r0.exited_clean = r1.exited_clean = true;
        auto vs2 = diagnose_stall(view(4, {r0, r1, idle(2, 42), waiting(3, 42, 40.0)}), kNow, kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::ExtraOp);
        CHECK(vs2[0].culprits == Ranks{3});
        CHECK(std::any_of(vs2[0].evidence.begin(), vs2[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "2 of them exited cleanly"); }));
    }
    SECTION("a killed rank among the others: DEAD, not EXTRA_OP") {
        auto r0 = idle(0, 42);
        r0.alive = false;
        r0.heartbeat_age_s = 30;
        auto vs2 = diagnose_stall(view(4, {r0, idle(1, 42), idle(2, 42), waiting(3, 42, 40.0)}), kNow, kTimeout);
        CHECK(find_kind(vs2, Kind::ExtraOp) == nullptr);
        CHECK(find_kind(vs2, Kind::Dead) != nullptr);
    }
    SECTION("ranks missing from the folder could be the majority: no EXTRA_OP") {
        // 1 waits, 2 rest, 3 not visible: the unseen ranks might be waiting too.
        auto vs2 = diagnose_stall(view(6, {idle(0, 42), idle(1, 42), waiting(2, 42, 40.0)}), kNow, kTimeout);
        REQUIRE(!vs2.empty());
        CHECK(vs2[0].kind == Kind::NotJoined);
        CHECK(vs2[0].culprits == Ranks{0, 1});
        INFO(vs2[0].summary);
        CHECK(contains(vs2[0].summary, "rank 2 may have issued an extra collective"));
    }
    SECTION("ranks missing but too few to change the majority: EXTRA_OP, missing listed") {
        auto vs2 = diagnose_stall(
            view(8, {idle(0, 42), idle(1, 42), idle(2, 42), idle(3, 42), idle(4, 42), waiting(5, 42, 40.0)}), kNow,
            kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::ExtraOp);
        CHECK(vs2[0].missing == Ranks{6, 7});
    }
    SECTION("a group launch: the ahead rank issued two ops in one group") {
        auto r3 = waiting(3, 42, 40.0, 44);  // #43 and #44 issued together, the GPU waits in #43
        auto vs2 = diagnose_stall(view(4, {idle(0, 42), idle(1, 42), idle(2, 42), r3}), kNow, kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::ExtraOp);
        CHECK(vs2[0].seq == 43);
        CHECK(vs2[0].culprits == Ranks{3});
    }
    SECTION("a minority behind a waiting majority stays NOT_JOINED") {
        auto vs2 = diagnose_stall(
            view(4, {waiting(0, 42, 40.0), waiting(1, 42, 40.0), idle(2, 42), waiting(3, 42, 40.0)}), kNow, kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].kind == Kind::NotJoined);
        CHECK(vs2[0].culprits == Ranks{2});
    }
}

namespace {

// A rank whose window holds the ops of seqs 1..last, op types from `pattern` (by seq), issued `gap` seconds apart
// (gap_at: a different gap before that seq). Ends idle at `last`, or waiting in `last` when `wait` is set.
RankCommState patterned(int r, uint64_t last, const std::vector<OpType>& ops, bool wait, double gap = 1.0,
                        uint64_t gap_at = 0, double other_gap = 0) {
    RankCommState s;
    s.comm_rank = r;
    s.global_rank = r;
    s.host = "node0";
    s.pid = 1000 + r;
    s.gpu_tracking = true;
    s.issued = last;
    s.reached = last;
    s.completed = wait ? last - 1 : last;
    const uint64_t first = last > 40 ? last - 39 : 1;
    double t = 300.0;  // seconds ago at the first op
    for (uint64_t q = first; q <= last; ++q) {
        if (q > first) t -= (q == gap_at ? other_gap : gap);
        OpSig x = sig(q, ops[size_t(q - 1)]);
        x.t_issue_ns = ago(t + 50.0);
        s.recent.push_back(x);
    }
    s.t_last_issue_ns = s.recent.back().t_issue_ns;
    s.t_last_progress_ns = s.recent.back().t_issue_ns;
    if (wait) s.stall_since_ns = s.recent.back().t_issue_ns;
    return s;
}

// The op of a period-3 training loop at seq q: AllGather, ReduceScatter, AllReduce.
std::vector<OpType> loop_ops(uint64_t n, uint64_t inserted_at = 0) {
    std::vector<OpType> out;
    const OpType cycle[] = {OpType::AllGather, OpType::ReduceScatter, OpType::AllReduce};
    size_t k = 0;
    for (uint64_t q = 1; q <= n; ++q) {
        if (q == inserted_at) {
            out.push_back(OpType::Broadcast);
            continue;
        }
        out.push_back(cycle[k++ % 3]);
    }
    return out;
}

}  // namespace

TEST_CASE("verdict: 1 vs 1, the signature windows break the tie", "[verdict]") {
    SECTION("rank 1's ops are rank 0's periodic pattern with one op inserted: EXTRA_OP") {
        auto r0 = patterned(0, 59, loop_ops(59), false);
        auto r1 = patterned(1, 60, loop_ops(60, 50), true);
        auto vs = diagnose_stall(view(2, {r0, r1}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::ExtraOp);
        CHECK(vs[0].culprits == Ranks{1});
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "with one op inserted at #50"); }));
    }
    SECTION("rank 0's ops are rank 1's periodic pattern with one op missing: NOT_JOINED names rank 0") {
        // Rank 0 skipped the AllReduce at #51: after it, everything it issued is one seq early.
        auto all = loop_ops(60);
        auto skipped = all;
        skipped.erase(skipped.begin() + 50);
        auto r0 = patterned(0, 59, skipped, false);
        auto r1 = patterned(1, 60, all, true);
        auto vs = diagnose_stall(view(2, {r0, r1}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "missing"); }));
    }
    SECTION("identical ops: a ~2x issue gap shows the skipper") {
        std::vector<OpType> ar(60, OpType::AllReduce);
        auto r0 = patterned(0, 59, ar, false, 1.0, 45, 2.0);
        auto r1 = patterned(1, 60, ar, true);
        auto vs = diagnose_stall(view(2, {r0, r1}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{0});
    }
    SECTION("identical ops: an unusually short gap shows the extra op") {
        std::vector<OpType> ar(60, OpType::AllReduce);
        auto r0 = patterned(0, 59, ar, false);
        auto r1 = patterned(1, 60, ar, true, 1.0, 52, 0.1);
        auto vs = diagnose_stall(view(2, {r0, r1}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::ExtraOp);
        CHECK(vs[0].culprits == Ranks{1});
    }
    SECTION("nothing tells them apart: NOT_JOINED as before, both named in the summary, which says so") {
        std::vector<OpType> ar(60, OpType::AllReduce);
        auto vs = diagnose_stall(view(2, {patterned(0, 59, ar, false), patterned(1, 60, ar, true)}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{0});
        CHECK(contains(vs[0].summary, "rank 0 is behind: completed #59, never issued #60"));
        CHECK(contains(vs[0].summary, "ambiguous (1 vs 1): rank 1 may instead have issued an extra collective"));
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
            return contains(e, "1 vs 1: the op counts alone cannot say which side diverged");
        }));
    }
}

TEST_CASE("verdict: mismatch fields for AllGather/ReduceScatter and dtypes", "[verdict]") {
    auto with = [](RankCommState r, const OpSig& s) {
        for (auto& x : r.recent)
            if (x.seq == s.seq) x = s;
        return r;
    };
    SECTION("a rank passes the total count to AllGather") {
        auto ag = [](uint64_t n) { return sig(42, OpType::AllGather, n); };
        auto ms = find_mismatches(view(4, {with(idle(0, 42), ag(1024)), with(idle(1, 42), ag(4096)),
                                           with(idle(2, 42), ag(1024)), with(idle(3, 42), ag(1024))}));
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{1});
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(), [](const std::string& e) {
            return contains(e,
                            "AllGather: rank 1 passed 4096 = 1024 x 4 ranks: the total where AllGather takes the "
                            "per-rank send count");
        }));
    }
    SECTION("different dtypes: bytes compared and the differing field named") {
        // bfloat16 (9) x 2048 = 4096 bytes = float32 x 1024: the buffers line up but the values are reinterpreted.
        auto ms = find_mismatches(view(3, {with(idle(0, 42), sig(42, OpType::AllReduce, 1024)),
                                           with(idle(1, 42), sig(42, OpType::AllReduce, 1024)),
                                           with(idle(2, 42), sig(42, OpType::AllReduce, 2048, -1, kSum, 9))}));
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{2});
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(), [](const std::string& e) {
            return contains(e, "dtype: ranks 0,1 = float32; rank 2 = bfloat16");
        }));
        CHECK(std::any_of(ms[0].evidence.begin(), ms[0].evidence.end(), [](const std::string& e) {
            return contains(e, "bytes (count x dtype size): ranks 0,1 = 4096; rank 2 = 4096 (equal");
        }));
    }
}

namespace {

PeerP2p peer(int p, uint64_t si, uint64_t sc, uint64_t ri, uint64_t rc, double pending_for = 0) {
    PeerP2p e;
    e.peer = p;
    e.sends_issued = si, e.sends_completed = sc, e.recvs_issued = ri, e.recvs_completed = rc;
    if (si > sc) e.t_oldest_send_pending_ns = ago(pending_for);
    if (ri > rc) e.t_oldest_recv_pending_ns = ago(pending_for);
    return e;
}

RankCommState p2p_rank(int r, std::vector<PeerP2p> peers) {
    RankCommState s = idle(r, 10);
    s.p2p_known = true;
    s.p2p = std::move(peers);
    return s;
}

}  // namespace

TEST_CASE("verdict: point-to-point", "[verdict]") {
    SECTION("a stall with only a send outstanding, the peer never posted the recv: MISMATCH, not UNKNOWN") {
        // Pipeline stage 0 sends micro-batch 5 to stage 1, which posted only 4 receives and is idle.
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {peer(0, 0, 0, 4, 4)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Mismatch);
        CHECK(vs[0].culprits == Ranks{1});
        CHECK(vs[0].waiting == Ranks{0});
        CHECK(contains(vs[0].summary,
                       "p2p: rank 0 waits 30.0 s in send #5 to rank 1, but rank 1 posted only 4 "
                       "receives from rank 0 and waits in none from it: unmatched send/recv pair"));
        CHECK(std::all_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "p2p"); }));
    }
    SECTION("both sides posted, neither completes: stuck inside NCCL") {
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {peer(0, 0, 0, 5, 4, 30.0)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
    }
    SECTION("a recv whose peer is not visible: UNKNOWN naming it") {
        auto vs = diagnose_stall(view(3, {p2p_rank(0, {peer(2, 0, 0, 3, 2, 30.0)}), p2p_rank(1, {})}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].culprits == Ranks{2});
    }
    SECTION("below the timeout: nothing") {
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 3.0)}), p2p_rank(1, {peer(0, 0, 0, 4, 4)})});
        CHECK(diagnose_stall(v, kNow, kTimeout).empty());
    }
    SECTION("without a stall: a completed send that no recv matches") {
        auto v = view(2, {p2p_rank(0, {peer(1, 6, 6, 0, 0)}), p2p_rank(1, {peer(0, 0, 0, 5, 5)})});
        auto ms = find_mismatches(v);
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{1});
        CHECK(contains(ms[0].summary, "rank 0 completed 6 sends to rank 1, but rank 1 posted only 5 receives"));
    }
    SECTION("matched counts: nothing") {
        auto v = view(2, {p2p_rank(0, {peer(1, 6, 6, 2, 2)}), p2p_rank(1, {peer(0, 2, 2, 6, 6)})});
        CHECK(find_mismatches(v).empty());
    }
    SECTION("the peer's ring wrapped and holds nothing of us: not judged") {
        auto r1 = p2p_rank(1, {});
        r1.p2p_wrapped = true;
        CHECK(find_mismatches(view(2, {p2p_rank(0, {peer(1, 6, 6, 0, 0)}), r1})).empty());
    }
}

namespace {

RankCommState initing(int r, double for_s, const std::string& host = "node0", int dev = -1) {
    RankCommState s;
    s.comm_rank = r;
    s.global_rank = r;
    s.host = host;
    s.pid = 1000 + r;
    s.comm_state = uint32_t(ncw::disk::CommState::Initializing);
    s.t_init_start_ns = ago(for_s);
    s.cuda_dev = dev < 0 ? r : dev;
    s.local_rank = r;
    s.pci_bus_id = "0000:0" + std::to_string(s.cuda_dev) + ":00.0";
    s.nranks_declared = 4;
    s.world_size = 4;
    s.master_addr = "10.0.0.1:29500";
    return s;
}

}  // namespace

TEST_CASE("verdict: communicator init that does not finish", "[verdict]") {
    SECTION("three entered, one never appeared") {
        auto vs = diagnose_stall(view(4, {initing(0, 40), initing(1, 39), initing(2, 41)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::InitHang);
        CHECK(vs[0].culprits == Ranks{3});
        CHECK(vs[0].waiting == Ranks{0, 1, 2});
        CHECK(vs[0].missing == Ranks{3});
        CHECK(contains(vs[0].summary, "ranks 0,1,2 of 4 entered it and wait; rank 3 never appeared"));
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
            return contains(e,
                            "checklist: agree or fine: communicator size, WORLD_SIZE, master address, one GPU per "
                            "rank");
        }));
    }
    SECTION("below the timeout: nothing") {
        CHECK(diagnose_stall(view(4, {initing(0, 4), initing(1, 3)}), kNow, kTimeout).empty());
    }
    SECTION("some finished, and the seed checklist finds two ranks on one GPU and a size disagreement") {
        auto r0 = initing(0, 40), r1 = initing(1, 40, "node0", 0), r2 = initing(2, 40);
        r2.nranks_declared = 8;
        r2.master_addr = "10.0.0.2:29500";
        auto r3 = initing(3, 40);
        r3.comm_state = uint32_t(ncw::disk::CommState::Active);
        r3.t_init_done_ns = ago(38);
        auto vs = diagnose_stall(view(4, {r0, r1, r2, r3}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::InitHang);
        CHECK(contains(vs[0].summary, "rank 3 finished it"));
        auto has = [&](const std::string& s) {
            return std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                               [&](const std::string& e) { return contains(e, s); });
        };
        CHECK(has("checklist: ranks 0,1 on host node0 share one GPU (0000:00:00.0)"));
        CHECK(has("has LOCAL_RANK=1 but uses GPU 0"));
        CHECK(has("checklist: ranks disagree on the communicator size: ranks 0,1,3 = 4; rank 2 = 8"));
        CHECK(
            has("checklist: ranks disagree on the master address: ranks 0,1,3 = 10.0.0.1:29500; rank 2 = "
                "10.0.0.2:29500"));
    }
    SECTION("every rank entered, none finished: nobody visible is blamed") {
        auto vs = diagnose_stall(view(2, {initing(0, 40), initing(1, 40)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].culprits.empty());
        CHECK(contains(vs[0].summary, "every rank entered (bootstrap network or master address?)"));
    }
}

TEST_CASE("verdict: waiting ranks wait at different sequence numbers", "[verdict]") {
    // Rank 0's GPU finished #42 ahead of rank 1's completion event and now waits in #43; rank 1 still waits in #42;
    // rank 2 never issued #42. The oldest wait decides: #42, with rank 2 behind and rank 0 not counted as waiting in
    // it.
    auto v = view(3, {waiting(0, 42, 15.0), waiting(1, 41, 20.0), idle(2, 41)});
    auto vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == Kind::NotJoined);
    CHECK(vs[0].seq == 42);
    CHECK(vs[0].waiting == Ranks{1});
    CHECK(vs[0].culprits == Ranks{2});
    CHECK(vs[0].stalled_for_s == Approx(20.0).margin(0.01));
    CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
        return contains(e, "rank 0 ") && contains(e, "waiting 15.0 s in #43");
    }));

    SECTION("the oldest wait is below the timeout: the newer one still decides") {
        auto v2 = view(3, {waiting(0, 42, 15.0), waiting(1, 41, 2.0), idle(2, 41)});
        auto vs2 = diagnose_stall(v2, kNow, kTimeout);
        REQUIRE(vs2.size() == 1);
        CHECK(vs2[0].seq == 43);
        CHECK(vs2[0].culprits == Ranks{1, 2});
        CHECK(contains(vs2[0].summary, "rank 1 is behind: completed #41, inside #42, never issued #43"));
        CHECK(vs2[0].summary.find("rank 1 is behind") < vs2[0].summary.find("rank 2 is behind"));
    }
}

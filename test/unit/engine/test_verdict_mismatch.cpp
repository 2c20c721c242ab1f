// The verdict engine on mismatched signatures: fields, op kinds, and the 1 vs 1 tie the signature windows break.
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

TEST_CASE("verdict: signature mismatches", "[verdict]") {
    auto with = [](RankCommState r, const OpSig& s) {
        for (auto& x : r.recent.mut())
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
        for (auto& x : r.recent.mut())
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

// Drift: a rank that skipped or added collectives in a run of same-shaped ones, found by aligning its op stream
// against the others'; the MISMATCHes and the hang that follow are its consequences, not leads.
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

// The others' stream: seq 1..n, op(seq) gives each one's signature.
template <class F>
std::vector<OpSig> stream(uint64_t n, F op) {
    std::vector<OpSig> out;
    for (uint64_t q = 1; q <= n; ++q) {
        OpSig s = op(q);
        s.seq = q;
        out.push_back(s);
    }
    return out;
}

// A loop of same-shaped all_reduces with a broadcast every 10th op.
OpSig loop_op(uint64_t q) { return q % 10 == 0 ? sig(q, OpType::Broadcast, 1048576, 0) : sig(q); }
// Every op of its own shape: where a drift began is then exact.
OpSig distinct_op(uint64_t q) { return sig(q, OpType::AllReduce, 1000 + q); }

// `m` with k ops skipped (k > 0) at seq s, or -k ops `added` there (k < 0), renumbered.
std::vector<OpSig> drifted(const std::vector<OpSig>& m, uint64_t s, int k,
                           const OpSig& added = sig(0, OpType::AllReduce, 7)) {
    std::vector<OpSig> out;
    for (const auto& g : m) {
        if (g.seq == s && k < 0)
            for (int i = 0; i < -k; ++i) out.push_back(added);
        if (k > 0 && g.seq >= s && g.seq < s + uint64_t(k)) continue;
        out.push_back(g);
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].seq = i + 1;
    if (k < 0) out.resize(m.size());  // as far as the others got
    return out;
}

// A rank that completed #done with the given signature window.
RankCommState with_stream(RankCommState r, std::vector<OpSig> sigs) {
    r.recent = std::move(sigs);
    return r;
}

}  // namespace

TEST_CASE("drift: alignment of one rank's stream against the others'", "[verdict][drift]") {
    SECTION("skip at s, k = 1, every op of its own shape: exact") {
        const auto m = stream(40, distinct_op);
        const auto d = align_streams(drifted(m, 21, 1), m);
        REQUIRE(d);
        CHECK(d->shift == 1);
        CHECK(d->first_seq == 21);
        CHECK(d->last_seq == 21);
        CHECK(d->odd_from == 21);
        CHECK(d->odd_to == 39);
        CHECK(d->aligned == 19);
        REQUIRE(d->ops.size() == 1);
        CHECK(d->ops[0].count == 1021);
        CHECK(drift_words(*d) == "AllReduce #21: its #21..#39 are the others' #22..#40, which NCCL paired silently");
    }
    SECTION("skip in a loop of same-shaped ops: the run it happened in") {
        const auto m = stream(40, loop_op);
        const auto d = align_streams(drifted(m, 15, 1), m);
        REQUIRE(d);
        CHECK(d->shift == 1);
        CHECK(d->first_seq == 11);  // after the broadcast at #10
        CHECK(d->last_seq == 19);   // its #19 is the others' broadcast #20
        CHECK(d->explained == 5);   // #19, #20, #29, #30, #39
        CHECK(drift_what(*d) == "one AllReduce between #11 and #19");
    }
    SECTION("extra at s, k = -1") {
        const auto m = stream(40, distinct_op);
        const auto d = align_streams(drifted(m, 21, -1), m);
        REQUIRE(d);
        CHECK(d->shift == -1);
        CHECK(d->first_seq == 21);
        CHECK(d->last_seq == 21);
        CHECK(d->odd_from == 22);
        REQUIRE(d->ops.size() == 1);
        CHECK(d->ops[0].count == 7);  // its own op, the one added
        CHECK(drift_words(*d) == "AllReduce #21: its #22..#40 are the others' #21..#39, which NCCL paired silently");
    }
    SECTION("skip of two, k = 2") {
        const auto m = stream(40, distinct_op);
        const auto d = align_streams(drifted(m, 21, 2), m);
        REQUIRE(d);
        CHECK(d->shift == 2);
        CHECK(d->last_seq == 21);
        CHECK(d->ops.size() == 2);
        CHECK(drift_what(*d) == "2 ops (AllReduce, AllReduce) at #21..#22");
    }
    SECTION("two extra, k = -2") {
        const auto m = stream(40, distinct_op);
        const auto d = align_streams(drifted(m, 21, -2), m);
        REQUIRE(d);
        CHECK(d->shift == -2);
        CHECK(d->last_seq == 21);
        CHECK(d->odd_from == 23);
    }
    SECTION("a window that begins after the broadcast before the skip: at or before, never a range it cannot see") {
        const auto m = stream(40, loop_op);
        auto odd = drifted(m, 15, 1);
        std::vector<OpSig> seen(m.begin() + 15, m.end());  // the others' #16..#40
        const auto d = align_streams(odd, seen);
        REQUIRE(d);
        CHECK(d->from_window);
        CHECK(d->last_seq == 19);
        CHECK(drift_what(*d) == "one AllReduce at or before #19");
        // A hole in the others' window (digests that skipped #11..#12) ends the walk back the same way.
        std::vector<OpSig> holed;
        for (const auto& g : m)
            if (g.seq != 11 && g.seq != 12) holed.push_back(g);
        const auto h = align_streams(odd, holed);
        REQUIRE(h);
        CHECK(h->from_window);
        CHECK(h->first_seq == 12);
        CHECK(drift_what(*h) == "one AllReduce at or before #19");
    }
    SECTION("no drift: the same stream") {
        const auto m = stream(40, loop_op);
        CHECK_FALSE(align_streams(m, m));
    }
    SECTION("too short a window after the drift: no claim") {
        const auto m = stream(40, distinct_op);
        // Skipped at #36: only #36..#39 follow it, fewer than kMinDriftAligned.
        CHECK_FALSE(align_streams(drifted(m, 36, 1), m));
        // And the same skip with the window long enough.
        CHECK(align_streams(drifted(m, 33, 1), m));
    }
    SECTION("a genuine mismatch is not a shift") {
        const auto m = stream(40, loop_op);
        auto odd = m;
        odd[20].count = 524288;  // one op of another count
        CHECK_FALSE(align_streams(odd, m));
        odd[30] = sig(31, OpType::Broadcast, 1048576, 0);  // and a broadcast in place of an all_reduce
        CHECK_FALSE(align_streams(odd, m));
        // A broadcast in place of the all_reduce before the others' broadcast: one shifted op fits, one is not enough.
        auto one = m;
        one[18] = sig(19, OpType::Broadcast, 1048576, 0);
        CHECK_FALSE(align_streams(one, m));
    }
    SECTION("ties: a stream that a skip and an extra op both fit claims nothing") {
        const auto m = stream(40, [](uint64_t q) { return q % 2 ? sig(q) : sig(q, OpType::Broadcast, 1048576, 0); });
        CHECK_FALSE(align_streams(drifted(m, 21, 1), m));
    }
}

TEST_CASE("drift: one verdict for a skip, its MISMATCHes as consequences", "[verdict][drift]") {
    const auto m = stream(33, loop_op);
    SECTION("while the job runs: the drift's NOT_JOINED leads") {
        // Rank 3 skipped one all_reduce after the broadcast #10: its #19 is the others' broadcast #20.
        auto v = view(4, {with_stream(idle(0, 33), m), with_stream(idle(1, 33), m), with_stream(idle(2, 33), m),
                          with_stream(idle(3, 32), drifted(m, 15, 1))});
        const auto vs = find_mismatches(v);
        const Verdict* lead = find_kind(vs, Kind::NotJoined);
        REQUIRE(lead);
        CHECK(lead->culprits == Ranks{3});
        REQUIRE(lead->drift);
        CHECK(lead->drift->shift == 1);
        CHECK(contains(lead->summary,
                       "rank 3 skipped one AllReduce between #11 and #19: its #19..#32 are the "
                       "others' #20..#33, which NCCL paired silently"));
        CHECK(drift_only(*lead));
        size_t mismatches = 0;
        for (const auto& x : vs)
            if (x.kind == Kind::Mismatch) {
                ++mismatches;
                CHECK(x.consequence);
                CHECK(x.consequence_of == "rank 3 skipped one AllReduce between #11 and #19");
            }
        CHECK(mismatches == 4);  // #19, #20, #29, #30
    }
    SECTION("at the stall: the stall's NOT_JOINED carries the drift, one lead") {
        auto v = view(4, {with_stream(waiting(0, 32, 30), m), with_stream(waiting(1, 32, 30), m),
                          with_stream(waiting(2, 32, 30), m), with_stream(idle(3, 32, 31), drifted(m, 15, 1))});
        auto vs = find_mismatches(v);
        for (auto& x : diagnose_stall(v, kNow, kTimeout)) vs.push_back(std::move(x));
        fold_drifts(vs);
        size_t leads = 0;
        for (const auto& x : vs) leads += !x.consequence;
        CHECK(leads == 1);
        const Verdict* lead = find_kind(vs, Kind::NotJoined);
        REQUIRE(lead);
        CHECK_FALSE(lead->consequence);
        CHECK(lead->seq == 33);
        CHECK(lead->waiting == Ranks{0, 1, 2});
        REQUIRE(lead->drift);
        CHECK(lead->drift->last_seq == 19);
        CHECK(std::count_if(vs.begin(), vs.end(), [](const Verdict& x) { return x.kind == Kind::NotJoined; }) == 1);
    }
    SECTION("the hang where the shapes meet: every rank inside #19, the drift leads, STUCK_IN_NCCL follows") {
        // A real NCCL may hang where a broadcast meets an all_reduce, while the hosts issue on.
        auto v =
            view(4, {with_stream(waiting(0, 18, 30, 33), m), with_stream(waiting(1, 18, 30, 33), m),
                     with_stream(waiting(2, 18, 30, 33), m), with_stream(waiting(3, 18, 30, 32), drifted(m, 15, 1))});
        auto vs = find_mismatches(v);
        for (auto& x : diagnose_stall(v, kNow, kTimeout)) vs.push_back(std::move(x));
        fold_drifts(vs);
        const Verdict* stuck = find_kind(vs, Kind::StuckInNccl);
        REQUIRE(stuck);
        CHECK(stuck->consequence);
        const Verdict* lead = find_kind(vs, Kind::NotJoined);
        REQUIRE(lead);
        CHECK_FALSE(lead->consequence);
        CHECK(lead->seq == 19);
        CHECK(lead->waiting == Ranks{0, 1, 2, 3});
        size_t leads = 0;
        for (const auto& x : vs) leads += !x.consequence;
        CHECK(leads == 1);
    }
    SECTION("an extra op of the same shape: EXTRA_OP with the drift") {
        auto odd = drifted(m, 15, -1, sig(0));
        auto v = view(4, {with_stream(idle(0, 33), m), with_stream(idle(1, 33), m), with_stream(idle(2, 33), m),
                          with_stream(idle(3, 33), odd)});
        const auto vs = find_mismatches(v);
        const Verdict* lead = find_kind(vs, Kind::ExtraOp);
        REQUIRE(lead);
        CHECK(lead->culprits == Ranks{3});
        REQUIRE(lead->drift);
        CHECK(lead->drift->shift == -1);
        CHECK(lead->drift->first_seq == 11);
        CHECK(lead->drift->last_seq == 20);  // its #20 is an all_reduce where the others broadcast
    }
    SECTION("two ranks, 1 vs 1: no side to blame, no drift") {
        auto v = view(2, {with_stream(idle(0, 33), m), with_stream(idle(1, 32), drifted(m, 15, 1))});
        const auto vs = find_mismatches(v);
        CHECK_FALSE(find_kind(vs, Kind::NotJoined));
        for (const auto& x : vs) CHECK_FALSE(x.consequence);
    }
}

TEST_CASE(
    "drift: a job that hangs at the first op of another shape: the MISMATCH says where a skip or an extra op "
    "could have been",
    "[verdict][drift]") {
    // Ranks 0-2 issued `m` and rank 3 `odd`, every rank completed all but the last: the MISMATCH found.
    const auto mismatch_of = [](const std::vector<OpSig>& m, const std::vector<OpSig>& odd) {
        const uint64_t done = m.size() - 1;
        const auto vs = find_mismatches(view(4, {with_stream(idle(0, done), m), with_stream(idle(1, done), m),
                                                 with_stream(idle(2, done), m), with_stream(idle(3, done), odd)}));
        const Verdict* v = find_kind(vs, Kind::Mismatch);
        return v ? std::optional<Verdict>(*v) : std::nullopt;
    };
    SECTION("one all_reduce skipped after the broadcast #10: its broadcast #19 meets the others' all_reduce") {
        auto odd = drifted(stream(20, loop_op), 15, 1);
        odd.resize(19);
        const auto v = mismatch_of(stream(19, loop_op), odd);
        REQUIRE(v);
        CHECK(v->seq == 19);
        CHECK(v->culprits == Ranks{3});
        CHECK_FALSE(v->drift);  // nothing after #19 to prove the shift
        CHECK(contains(v->summary, "rank 3 may instead have skipped one AllReduce between #11 and #19"));
        CHECK(contains(v->summary, "its Broadcast #19 would be the op the others issue next"));
    }
    SECTION("one all_reduce added: its all_reduce #20 meets the others' broadcast") {
        const auto m = stream(20, loop_op);
        const auto v = mismatch_of(m, drifted(m, 15, -1, sig(0)));
        REQUIRE(v);
        CHECK(v->seq == 20);
        CHECK(contains(v->summary, "rank 3 may instead have added one AllReduce between #11 and #19"));
        CHECK(contains(v->summary, "its AllReduce #20 is the others' #19"));
    }
    SECTION("no alternative: an op the others never issue, or a different op right after the ranks last agreed") {
        const auto broadcast_last = [](std::vector<OpSig> m) {
            m.back() = sig(m.back().seq, OpType::Broadcast, 1048576, 0);
            return m;
        };
        const auto plain = stream(19, [](uint64_t q) { return sig(q); });
        const auto v = mismatch_of(plain, broadcast_last(plain));
        REQUIRE(v);
        CHECK_FALSE(contains(v->summary, "may instead"));
        const auto loop = stream(11, loop_op);  // #10 broadcast, #11 all_reduce: no same-shaped op to hide a skip
        const auto w = mismatch_of(loop, broadcast_last(loop));
        REQUIRE(w);
        CHECK_FALSE(contains(w->summary, "may instead"));
    }
}

namespace {

// `s` with the same-shaped all_reduces #1..#last, issued from `t0` on its own clock, gap_ns(q) before #q.
template <class Gap>
RankCommState paced(RankCommState s, uint64_t last, uint64_t t0, Gap gap_ns) {
    s.recent.clear();
    uint64_t t = t0;
    for (uint64_t q = 1; q <= last; ++q) {
        t += gap_ns(q);
        OpSig g = sig(q);
        g.t_issue_ns = t;
        s.recent.push_back(g);
    }
    return s;
}

}  // namespace

TEST_CASE("drift: a NOT_JOINED where every op has one shape: the rank's own pace says where a skip could have been",
          "[verdict][drift]") {
    // 4 ranks, a step of 100 ms per all_reduce (each rank's own clock: rank 3's is 5 s off). Ranks 0-2 issued #1..#30
    // and wait in #30; rank 3 issued #1..#29 and is idle. `skip_at`: rank 3 skipped the op between its #skip_at - 1
    // and #skip_at (its gap there two steps); 0: no skip (an even pace).
    const auto judge = [](uint64_t skip_at, double jitter_ms = 0) {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 4; ++r)
            ranks.push_back(paced(r == 3 ? idle(r, 29, 15.0) : waiting(r, 29, 15.0), r == 3 ? 29 : 30,
                                  kSec + (r == 3 ? 5 * kSec : 0), [&](uint64_t q) {
                                      return 100'000'000ull + (r == 3 && q == skip_at ? 100'000'000ull : 0) +
                                             uint64_t(jitter_ms * 1e6 * double((q * 7 + uint64_t(r)) % 3));
                                  }));
        const auto vs = diagnose_stall(view(4, ranks), kNow, kTimeout);
        const Verdict* v = find_kind(vs, Kind::NotJoined);
        REQUIRE(v);
        CHECK(v->culprits == Ranks{3});
        return v->summary;
    };
    CHECK(contains(judge(12), "rank 3 may instead have skipped one AllReduce between its #11 and #12"));
    CHECK(contains(judge(12), "it took 200 ms from #11 to #12 where the others took 100 ms"));
    CHECK(contains(judge(25, 10), "between its #24 and #25"));
    // An even pace, or noise as large as the step: nothing stands out, nothing is said.
    CHECK_FALSE(contains(judge(0), "may instead"));
    CHECK_FALSE(contains(judge(0, 60), "may instead"));
}

TEST_CASE("drift: an EXTRA_OP where every op has one shape: the rank's own pace says where it could have been added",
          "[verdict][drift]") {
    // Ranks 0-2 issued #1..#29 at 100 ms a step and are idle; rank 3 issued one more, #12 1 ms after its #11, and
    // waits in #30.
    std::vector<RankCommState> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(paced(r == 3 ? waiting(r, 29, 15.0) : idle(r, 29, 15.0), r == 3 ? 30 : 29, kSec,
                              [&](uint64_t q) { return r == 3 && q == 12 ? 1'000'000ull : 100'000'000ull; }));
    const auto vs = diagnose_stall(view(4, ranks), kNow, kTimeout);
    const Verdict* v = find_kind(vs, Kind::ExtraOp);
    REQUIRE(v);
    CHECK(v->culprits == Ranks{3});
    CHECK(contains(v->summary, "rank 3 may instead have added one AllReduce as its #12"));
    CHECK(contains(v->summary, "it took 1 ms from #11 to #12 where the others took 100 ms"));
}

TEST_CASE("drift: a skipped or added CUDA graph replay, proven by the origins of one op number", "[verdict][drift]") {
    // Ranks 0-2 replayed a captured all_reduce once more than rank 3 (format 1.10: origin "replay"): rank 3's eager
    // all_reduce #20 was paired with their replay #20, and they wait in their eager #21.
    const auto replay = [](RankCommState r, uint64_t q) {
        for (auto& g : r.recent.mut())
            if (g.seq == q) g.origin = uint8_t(ncw::disk::RecordOrigin::Replay);
        return r;
    };
    SECTION("skipped: NOT_JOINED, said from the records") {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 3; ++r) ranks.push_back(replay(waiting(r, 20, 15.0), 20));
        ranks.push_back(idle(3, 20, 15.0));
        const auto vs = diagnose_stall(view(4, ranks), kNow, kTimeout);
        const Verdict* v = find_kind(vs, Kind::NotJoined);
        REQUIRE(v);
        CHECK(v->culprits == Ranks{3});
        CHECK(contains(v->summary, "rank 3 launched a CUDA graph fewer times than ranks 0,1,2 before its #20"));
        const bool said = std::any_of(v->evidence.begin(), v->evidence.end(), [](const std::string& e) {
            return contains(e,
                            "rank 3's #20 is a call where ranks 0,1,2's #20 is a CUDA graph replay, and NCCL "
                            "paired the two: in #17..#20 rank 3 has 0 replays of it, rank 0 1 (a skipped replay)");
        });
        CHECK(said);
        // Not also the generic guess.
        CHECK(std::none_of(v->evidence.begin(), v->evidence.end(),
                           [](const std::string& e) { return contains(e, "a `continue` before backward()"); }));
    }
    SECTION("as many replays in another order: said so, not a skip") {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 3; ++r) ranks.push_back(replay(waiting(r, 20, 15.0), 20));
        ranks.push_back(replay(idle(3, 20, 15.0), 19));
        const auto vs = diagnose_stall(view(4, ranks), kNow, kTimeout);
        const Verdict* v = find_kind(vs, Kind::NotJoined);
        REQUIRE(v);
        CHECK(contains(v->summary, "rank 3 launched a CUDA graph in another order than ranks 0,1,2 before its #20"));
        CHECK_FALSE(contains(v->summary, "fewer"));
    }
    SECTION("the same origins: nothing said of graphs") {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 3; ++r) ranks.push_back(waiting(r, 20, 15.0));
        ranks.push_back(idle(3, 20, 15.0));
        const auto vs = diagnose_stall(view(4, ranks), kNow, kTimeout);
        const Verdict* v = find_kind(vs, Kind::NotJoined);
        REQUIRE(v);
        CHECK_FALSE(contains(v->summary, "CUDA graph"));
    }
}

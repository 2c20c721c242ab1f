// The verdict engine on sends and receives paired one by one (issue 41): a pair whose sizes disagree (an
// all-to-all's stale split table), and a cycle of waits (two ranks that both send first).
#include "engine/verdict_p2p.h"
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

using ncw::verdict::P2pOp;

// One op of a peer's window: `seq`-th send (or receive) of `count` float32, on `stream`, in `group` (0: none),
// issued `ago_s` seconds ago; done or still open (returned from its call, started on the GPU).
P2pOp op(bool send, uint64_t seq, uint64_t count, bool done, double ago_s, uint32_t group = 0, uint64_t stream = 0x50) {
    P2pOp o;
    o.seq = seq, o.count = count, o.dtype = kFloat32, o.send = send, o.group_id = group, o.stream = stream;
    o.t_issue_ns = ago(ago_s);
    o.state = uint8_t(P2pOp::kReturned | P2pOp::kReached | (done ? P2pOp::kDone : 0));
    return o;
}

// The counts of a peer entry from its window: issued the highest seq, completed the highest done one.
PeerP2p with_ops(int peer, std::vector<P2pOp> ops) {
    PeerP2p e;
    e.peer = peer;
    for (const auto& o : ops) {
        auto& issued = o.send ? e.sends_issued : e.recvs_issued;
        auto& reached = o.send ? e.sends_reached : e.recvs_reached;
        auto& completed = o.send ? e.sends_completed : e.recvs_completed;
        auto& pending = o.send ? e.t_oldest_send_pending_ns : e.t_oldest_recv_pending_ns;
        issued = std::max(issued, o.seq), reached = issued;
        if (o.done()) completed = std::max(completed, o.seq);
        if (!o.done() && (!pending || o.t_issue_ns < pending)) pending = o.t_issue_ns;
    }
    e.ops = std::move(ops);
    return e;
}

RankCommState p2p_rank(RankCommState s, std::vector<PeerP2p> peers) {
    s.p2p_known = true;
    s.p2p = std::move(peers);
    return s;
}

// An all-to-all among 3 ranks at its 10th exchange, every pair's rows alike on both sides except where `stale`
// (rank 2's send to rank 0: twice the rows). Rank 2's send to rank 0 waits; everything else is done. `after`: the
// ranks then went into the step's all_reduce #10 (rank 2's GPU has not reached it).
CommView all_to_all(bool stale, bool after) {
    auto rows = [](int from, int to) { return uint64_t(1024 * (1 + (from * 3 + to) % 4)); };
    std::vector<RankCommState> ranks;
    for (int r = 0; r < 3; ++r) {
        std::vector<PeerP2p> peers;
        for (int q = 0; q < 3; ++q) {
            if (q == r) continue;
            const bool bad = stale && r == 2 && q == 0;
            peers.push_back(with_ops(q, {op(true, 10, bad ? 2 * rows(r, q) : rows(r, q), !bad, 30.0, 7 + r),
                                         op(false, 10, rows(q, r), true, 30.0, 7 + r)}));
        }
        RankCommState s = after ? waiting(r, 9, 29.0) : idle(r, 9);
        if (after && r == 2) s.reached = 9;
        ranks.push_back(p2p_rank(s, peers));
    }
    return view(3, std::move(ranks));
}

}  // namespace

TEST_CASE("verdict: a send and its receive that disagree in size", "[verdict]") {
    SECTION("an all-to-all's stale split table, the sender waiting for the rest: MISMATCH naming it") {
        auto v = all_to_all(true, false);
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::Mismatch);
        CHECK(vs[0].culprits == Ranks{2});
        REQUIRE(vs[0].pair_sizes);
        CHECK(vs[0].pair_sizes->sender == 2);
        CHECK(vs[0].pair_sizes->receiver == 0);
        CHECK(vs[0].pair_sizes->send.count == 2 * 1024 * 3);
        CHECK(vs[0].pair_sizes->recv.count == 1024 * 3);
        CHECK(vs[0].pair_sizes->grouped);  // each side's op in a group with ops to the third rank
        CHECK(vs[0].seq == 10);
        CHECK(contains(vs[0].summary,
                       "rank 2's Send #10 to rank 0 carries 24576 bytes (6144 float32), rank 0's Recv "
                       "#10 from rank 2 expects 12288 bytes (3072 float32)"));
        // find_mismatches names it too, with or without a stall (after the end, where NCCL completed both sides).
        CHECK(find_kind(find_mismatches(v), Kind::Mismatch) != nullptr);
    }
    SECTION("the ranks then wait in the step's all_reduce: the pair leads, the collective's stall follows it") {
        auto v = all_to_all(true, true);
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() >= 2);
        CHECK(vs[0].kind == Kind::Mismatch);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK_FALSE(vs[0].consequence);
        CHECK(vs[0].waiting == Ranks{0, 1, 2});
        for (size_t i = 1; i < vs.size(); ++i) {
            CHECK(vs[i].consequence);
            CHECK(contains(vs[i].consequence_of, "Send #10 to rank 0"));
        }
    }
    SECTION("sizes that agree: nothing") {
        auto v = all_to_all(false, false);
        CHECK(diagnose_stall(v, kNow, kTimeout).empty());
        CHECK(find_mismatches(v).empty());
    }
    SECTION("the rank in the most disagreeing pairs is named, receiver or sender") {
        // Rank 0's receive table is stale: it expects the wrong size from ranks 1 and 2 alike.
        auto v = view(3, {p2p_rank(idle(0, 9), {with_ops(1, {op(false, 4, 100, false, 30.0)}),
                                                with_ops(2, {op(false, 4, 100, false, 30.0)})}),
                          p2p_rank(idle(1, 9), {with_ops(0, {op(true, 4, 50, true, 30.0)})}),
                          p2p_rank(idle(2, 9), {with_ops(0, {op(true, 4, 50, true, 30.0)})})});
        auto m = p2p_size_mismatch(v, false);
        REQUIRE(m);
        CHECK(m->culprits == Ranks{0});
        CHECK(m->pair_sizes->pairs == 2);
        CHECK(m->pair_sizes->receiver == 0);
        CHECK_FALSE(m->pair_sizes->grouped);
    }
    SECTION("peers whose windows do not overlap prove nothing") {
        auto v = view(2, {p2p_rank(idle(0, 9), {with_ops(1, {op(true, 8, 100, true, 30.0)})}),
                          p2p_rank(idle(1, 9), {with_ops(0, {op(false, 4, 50, true, 30.0)})})});
        CHECK_FALSE(p2p_size_mismatch(v, false));
    }
}

TEST_CASE("verdict: a cycle of point-to-point waits", "[verdict]") {
    // Ranks 0 and 1 swap a tensor each step on one stream each; at #10 both send first, then receive. On a GPU both
    // calls return: each rank's Recv #10 is posted, queued behind its own Send #10, which waits for the other's Recv.
    auto swap = [](uint32_t recv_group, uint64_t recv_stream) {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 2; ++r) {
            const uint32_t g = recv_group ? recv_group + r : 0;
            // Step 9 as usual: rank 0 sent first, rank 1 received first.
            ranks.push_back(p2p_rank(idle(r, 9), {with_ops(1 - r, {op(true, 9, 64, true, r == 0 ? 40.0 : 39.9),
                                                                   op(false, 9, 64, true, r == 0 ? 39.9 : 40.0),
                                                                   op(true, 10, 64, false, 30.0, g),
                                                                   op(false, 10, 64, false, 29.9, g, recv_stream)})}));
        }
        return view(2, std::move(ranks));
    };
    SECTION("both send first, each receive queued behind its own send: DEADLOCK naming both") {
        auto v = swap(0, 0x50);
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::Deadlock);
        CHECK(vs[0].culprits == Ranks{0, 1});
        REQUIRE(vs[0].cycle.size() == 2);
        CHECK(vs[0].cycle[0].match_posted);
        CHECK(vs[0].cycle[0].op.op == uint8_t(ncw::disk::OpType::Send));
        CHECK(vs[0].cycle[0].op.root == 1);
        CHECK(vs[0].cycle[0].behind.root == 0);  // rank 1's own Send #10 to rank 0
        CHECK(contains(vs[0].summary,
                       "rank 0 waits 30.0 s in Send #10 to rank 1, whose Recv #10 from rank 0 is "
                       "queued behind its own Send #10 to rank 0"));
    }
    SECTION("earlier ops not seen complete (lower-bound counts): a later op done on the stream proves them done") {
        auto v = swap(0, 0x50);
        for (auto& r : v.ranks) {
            for (auto& o : r.p2p[0].ops)
                if (o.seq == 9) o.state &= uint8_t(~P2pOp::kDone);
            r.p2p[0].sends_completed = r.p2p[0].recvs_completed = 8;
            // The step's all_reduce #9 on the same stream, after the #9 exchange, completed.
            for (auto& g : r.recent.mut()) g.stream = 0x50, g.t_issue_ns = ago(35.0);
        }
        auto c = p2p_cycle(v, kNow, kTimeout);
        REQUIRE(c);
        CHECK(c->culprits == Ranks{0, 1});
        CHECK(c->seq == 10);
        // Without that proof the oldest open ops are #9, whose matches run: nothing is claimed.
        for (auto& r : v.ranks)
            for (auto& g : r.recent.mut()) g.stream = 0x99;
        CHECK_FALSE(p2p_cycle(v, kNow, kTimeout));
    }
    SECTION("the same ops in one group each (batch_isend_irecv): they run together, no cycle") {
        auto v = swap(5, 0x50);
        CHECK_FALSE(p2p_cycle(v, kNow, kTimeout));
    }
    SECTION("each receive on a stream of its own: not queued behind the send, no cycle") {
        auto v = swap(0, 0x60);
        CHECK_FALSE(p2p_cycle(v, kNow, kTimeout));
    }
    SECTION("not yet past the timeout: no verdict") {
        auto v = swap(0, 0x50);
        CHECK_FALSE(p2p_cycle(v, kNow, 60.0));
    }
    SECTION("blocked in the call of its own send (a blocking NCCL), the receive never posted: DEADLOCK") {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 2; ++r) {
            P2pOp s = op(true, 10, 64, false, 30.0);
            s.state = P2pOp::kReached;  // inside the call still
            ranks.push_back(p2p_rank(idle(r, 9), {with_ops(1 - r, {op(false, 9, 64, true, 40.0), s})}));
        }
        auto v = view(2, std::move(ranks));
        auto c = p2p_cycle(v, kNow, kTimeout);
        REQUIRE(c);
        CHECK(c->culprits == Ranks{0, 1});
        CHECK_FALSE(c->cycle[0].match_posted);
        // Its call returned (a GPU op, the CPU free to post the receive later): not proven.
        for (auto& r : v.ranks) r.p2p[0].ops.back().state |= P2pOp::kReturned;
        CHECK_FALSE(p2p_cycle(v, kNow, kTimeout));
    }
    SECTION("a pipeline's chain that ends at a rank at rest is no cycle") {
        auto v = view(3, {p2p_rank(idle(0, 9), {with_ops(1, {op(true, 5, 64, false, 30.0)})}),
                          p2p_rank(idle(1, 9), {with_ops(0, {op(false, 5, 64, false, 29.0)}),
                                                with_ops(2, {op(true, 5, 64, false, 29.5)})}),
                          p2p_rank(idle(2, 9), {with_ops(1, {op(false, 4, 64, true, 40.0)})})});
        CHECK_FALSE(p2p_cycle(v, kNow, kTimeout));
    }
}

TEST_CASE("verdict: a collective's stall waits for the sends and receives that may hold it", "[verdict]") {
    // Ranks 0 and 1 both send first at step 10 while ranks 2 and 3 go on into AllReduce #10; the all_reduce's waits
    // pass the timeout a moment before the sends' do. Judged then, the collective would read NOT_JOINED; the cycle is
    // the cause, so the stall waits for it (a CI run judged it in that moment).
    auto job = [](double sends_ago, double collective_ago) {
        std::vector<RankCommState> ranks;
        for (int r = 0; r < 2; ++r)
            ranks.push_back(p2p_rank(
                idle(r, 9, sends_ago + 1.0),
                {with_ops(1 - r, {op(true, 10, 64, false, sends_ago), op(false, 10, 64, false, sends_ago - 0.001)})}));
        for (int r = 2; r < 4; ++r) {
            RankCommState s = waiting(r, 9, collective_ago);
            s.p2p_known = true;
            ranks.push_back(s);
        }
        return view(4, std::move(ranks));
    };
    SECTION("the sends still short of the timeout: no verdict yet") {
        CHECK(diagnose_stall(job(kTimeout - 0.05, kTimeout + 0.05), kNow, kTimeout).empty());
    }
    SECTION("the sends past it too: the DEADLOCK leads, the all_reduce's NOT_JOINED follows from it") {
        auto vs = diagnose_stall(job(kTimeout + 0.01, kTimeout + 0.05), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::Deadlock);
        CHECK(vs[0].culprits == Ranks{0, 1});
        const Verdict* nj = find_kind(vs, Kind::NotJoined);
        REQUIRE(nj);
        CHECK(nj->consequence);
    }
    SECTION("sends issued a timeout after the stall began do not hold its verdict back") {
        auto vs = diagnose_stall(job(1.0, 2 * kTimeout + 1.5), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
    }
}

TEST_CASE("verdict: a collective held by a rank in its first send to a wrong peer", "[verdict]") {
    // A pipeline of 4 stages with a data-parallel all_reduce each step: stages 0, 1 and 3 wait in AllReduce #11; stage
    // 2 waits in its first ever Send to rank 0 (a wrong peer index), which never posted a receive from it, both having
    // exchanged with their neighbours for 10 steps. The send leads; the collective's NOT_JOINED follows from it.
    auto stage = [](int r, bool behind) {
        RankCommState s = behind ? idle(r, 10, 29.0) : waiting(r, 10, 29.0);
        s.p2p_known = true;
        for (int q : {r - 1, r + 1}) {
            if (q < 0 || q > 3) continue;
            PeerP2p e;
            e.peer = q;
            e.sends_issued = e.sends_reached = e.sends_completed = 10;
            e.recvs_issued = e.recvs_reached = e.recvs_completed = 10;
            s.p2p.push_back(e);
        }
        return s;
    };
    std::vector<RankCommState> ranks{stage(0, false), stage(1, false), stage(2, true), stage(3, false)};
    PeerP2p wrong;
    wrong.peer = 0;
    wrong.sends_issued = 1;
    wrong.t_oldest_send_pending_ns = ago(28.0);
    ranks[2].p2p.push_back(wrong);
    auto v = view(4, std::move(ranks));
    auto vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(vs.size() >= 2);
    CHECK(vs[0].kind == Kind::Mismatch);
    CHECK(vs[0].culprits == Ranks{2});
    CHECK(vs[0].op.root == 0);
    CHECK(contains(vs[0].summary, "its first ever to rank 0"));
    const Verdict* nj = find_kind(vs, Kind::NotJoined);
    REQUIRE(nj);
    CHECK(nj->consequence);
}

TEST_CASE("verdict: one node's view of an all-to-all held by a rank out of sight: UNKNOWN naming it, not its GPUs",
          "[verdict]") {
    // Measured at two nodes (examples/hang_scenarios.py moe_busy): node A holds ranks 0 and 1 of 4. Each waits in its
    // dispatch all-to-all's Send #19 to rank 3 (on node B, which never posted its receives), and issued the step's
    // all_reduce #10 after it on the same stream, which its GPU has not reached. Not GPU_NOT_REACHED of ranks 0 and 1:
    // their GPUs are behind NCCL's own sends, whose peer is out of sight.
    auto node_a_rank = [](int r) {
        RankCommState s = idle(r, 10, 18.0);
        s.completed = s.reached = 9;
        s.unreached = s.uncompleted = 10;
        s.gpu_tracking = true;
        s.p2p_known = true;
        std::vector<PeerP2p> peers;
        for (int q = 0; q < 4; ++q) {
            const bool open = q >= 2;  // the sends to node B's ranks wait (rank 2's behind rank 3's in the group)
            peers.push_back(
                with_ops(q, {op(true, 19, 4096, !open, 18.2, 30 + r), op(false, 19, 4096, !open, 18.2, 30 + r)}));
        }
        return p2p_rank(s, peers);
    };
    auto vs = diagnose_stall(view(4, {node_a_rank(0), node_a_rank(1)}), kNow, kTimeout);
    REQUIRE(!vs.empty());
    CHECK(vs[0].kind == Kind::Unknown);
    CHECK(contains(vs[0].summary, "not visible"));
    const Verdict* behind = find_kind(vs, Kind::GpuNotReached);
    CHECK((behind == nullptr || behind->consequence));
}

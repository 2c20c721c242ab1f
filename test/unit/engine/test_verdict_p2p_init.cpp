// The verdict engine on point-to-point traffic and on communicator init that does not finish.
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

namespace {

PeerP2p peer(int p, uint64_t si, uint64_t sc, uint64_t ri, uint64_t rc, double pending_for = 0) {
    PeerP2p e;
    e.peer = p;
    e.sends_issued = si, e.sends_completed = sc, e.recvs_issued = ri, e.recvs_completed = rc;
    e.sends_reached = si, e.recvs_reached = ri;  // its GPU started every one it issued
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
    SECTION("a stall with only a send outstanding, the peer at rest never posted the recv: NOT_JOINED") {
        // Pipeline stage 0 sends micro-batch 5 to stage 1, which posted only 4 receives and is idle: every op it
        // issued on the communicator is done, so it is in the user's code before its receive (a stage still
        // computing, a Python function it sits in), not inside NCCL.
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {peer(0, 0, 0, 4, 4)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{1});
        CHECK(vs[0].waiting == Ranks{0});
        CHECK(vs[0].op.op == uint8_t(ncw::disk::OpType::Recv));  // the op it never issued: the send's match
        CHECK(contains(vs[0].summary,
                       "p2p: rank 0 waits 30.0 s in send #5 to rank 1, but rank 1 posted only 4 "
                       "receives from rank 0 and waits in none from it: unmatched send/recv pair"));
        CHECK(std::all_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "p2p"); }));
    }
    SECTION("the peer waits in another op of the communicator instead: the pairs differ, MISMATCH") {
        // Head to head: each waits in a send to the other, and neither posted the receive.
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 2, 2, 30.0)}), p2p_rank(1, {peer(0, 3, 2, 4, 4, 30.0)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::Mismatch);
        CHECK(vs[0].culprits == Ranks{0, 1});
    }
    SECTION("a chain: the stage at rest is the one not joined, not the stage waiting on it") {
        // Stage 0 waits on stage 1, which waits in a send to stage 2; stage 2 is at rest before its receive.
        auto v = view(
            3, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {peer(0, 0, 0, 4, 4), peer(2, 3, 2, 0, 0, 30.0)}),
                p2p_rank(2, {peer(1, 0, 0, 2, 2)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{2});
    }
    SECTION("a stage that never posted the next pair while its last ones still run on its GPU: NOT_JOINED") {
        // The pipeline at two nodes: stage 2 went into a Python function after its 60th send and receive with stage
        // 3; its records still show the last few open (its GPU behind, lower-bound counts), but stage 3 and stage 1
        // completed their side of every one it posted. Stage 3 waits 13 s in #61, which stage 2 never posted.
        auto r2 = p2p_rank(2, {peer(1, 56, 55, 56, 55, 10.2), peer(3, 60, 55, 60, 54, 10.1)});
        auto v = view(4, {p2p_rank(0, {}), p2p_rank(1, {peer(2, 56, 56, 56, 56)}), r2,
                          p2p_rank(3, {peer(2, 61, 60, 61, 60, 13.1)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::NotJoined);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(vs[0].seq == 61);

        // Where stage 3 has not completed its side of what stage 2 posted, stage 2 is in order behind it: neither
        // NOT_JOINED nor MISMATCH.
        v.ranks[3].p2p = {peer(2, 61, 54, 61, 60, 13.1)};
        vs = diagnose_stall(v, kNow, kTimeout);
        CHECK(find_kind(vs, Kind::NotJoined) == nullptr);
        CHECK(find_kind(vs, Kind::Mismatch) == nullptr);
    }
    SECTION("both sides posted, neither completes: stuck inside NCCL") {
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {peer(0, 0, 0, 5, 4, 30.0)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::StuckInNccl);
    }
    SECTION("both sides posted, but one GPU has not started its op: not called stuck inside NCCL") {
        // Rank 1's receive is queued behind other work on its GPU (a pipeline's compute on a shared GPU).
        PeerP2p behind = peer(0, 0, 0, 5, 4, 30.0);
        behind.recvs_reached = 4;
        auto v = view(2, {p2p_rank(0, {peer(1, 5, 4, 0, 0, 30.0)}), p2p_rank(1, {behind})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(contains(vs[0].summary, "the GPU of rank 1 is not shown to have started the pending ops"));
        CHECK(vs[0].culprits.empty());
    }
    SECTION("a chain through a rank that is not visible: UNKNOWN naming the chain's end, not the link") {
        // One node's view of a pipeline: stage 0 waits on stage 1 (posted 4 sends to it), which waits in a receive
        // from stage 2 on another node. Stage 1 is a link of the chain, not a send/recv pair that differs.
        auto v = view(3, {p2p_rank(0, {peer(1, 4, 4, 5, 4, 30.0)}),
                          p2p_rank(1, {peer(0, 4, 4, 4, 4), peer(2, 4, 4, 5, 4, 31.0)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].culprits == Ranks{2});
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(), [](const std::string& e) {
            return contains(e, "rank 1 posted only 4 sends to rank 0: it waits in recv #5 from rank 2");
        }));
    }
    SECTION("a chain whose end has not waited past the timeout: UNKNOWN, not stuck inside NCCL") {
        auto v =
            view(3, {p2p_rank(0, {peer(1, 4, 4, 5, 4, 30.0)}),
                     p2p_rank(1, {peer(0, 4, 4, 4, 4), peer(2, 4, 4, 5, 4, 3.0)}), p2p_rank(2, {peer(1, 4, 4, 4, 4)})});
        auto vs = diagnose_stall(v, kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(contains(vs[0].summary, "rank 1 waits on other ranks in turn"));
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
    SECTION("without a stall: a completed send that no recv matches, the receiver done with the communicator") {
        auto receiver = p2p_rank(1, {peer(0, 0, 0, 5, 5)});
        receiver.comm_state = uint32_t(ncw::disk::CommState::Destroyed);
        auto v = view(2, {p2p_rank(0, {peer(1, 6, 6, 0, 0)}), receiver});
        auto ms = find_mismatches(v);
        REQUIRE(ms.size() == 1);
        CHECK(ms[0].culprits == Ranks{1});
        CHECK(contains(ms[0].summary, "rank 0 completed 6 sends to rank 1, but rank 1 posted only 5 receives"));
        SECTION("the receiver exited, or died, instead: the same") {
            receiver.comm_state = uint32_t(ncw::disk::CommState::Active);
            receiver.exited_clean = true;
            CHECK(find_mismatches(view(2, {p2p_rank(0, {peer(1, 6, 6, 0, 0)}), receiver})).size() == 1);
            receiver.exited_clean = false;
            receiver.alive = false;
            CHECK(find_mismatches(view(2, {p2p_rank(0, {peer(1, 6, 6, 0, 0)}), receiver})).size() == 1);
        }
    }
    SECTION("the receiver still running: nothing (a send completes into the connection's buffers first)") {
        // Measured at two nodes (a pipeline whose stage 2 is slow): stage 3 had completed 37 sends to stage 2, which
        // had posted 35 receives from it and was computing before the next; it posted them later.
        auto v = view(2, {p2p_rank(0, {peer(1, 37, 37, 0, 0)}), p2p_rank(1, {peer(0, 0, 0, 35, 35)})});
        CHECK(find_mismatches(v).empty());
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
    SECTION("the last to enter, 3 s ago, has finished while the others' frames say they still wait: nothing yet") {
        // init_hang at two nodes: rank 3 came 25 s late; its init took 3 s and finished; the collector has not yet
        // read the others' frames that say they finished too.
        auto r3 = initing(3, 3.1);
        r3.comm_state = uint32_t(ncw::disk::CommState::Active);
        r3.t_init_done_ns = ago(0.1);
        auto vs = diagnose_stall(view(4, {initing(0, 25), initing(1, 23), initing(2, 24), r3}), kNow, kTimeout);
        CHECK(vs.empty());
    }
    SECTION("every rank entered, none finished: nobody visible is blamed") {
        auto vs = diagnose_stall(view(2, {initing(0, 40), initing(1, 40)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].culprits.empty());
        CHECK(contains(vs[0].summary, "every rank entered (bootstrap network or master address?)"));
    }
}
TEST_CASE("verdict: a send to a peer that never takes from this rank (a wrong peer)", "[verdict]") {
    // A pipeline of 4 stages, 40 steps done (forward r -> r+1, gradients back); at step 41 rank 2 sends to rank 0
    // instead of rank 3. Rank 3 waits in its recv #41 from 2, rank 0 in its recv #41 from 1 (the gradients), rank 1 in
    // its recv #41 from 2.
    auto pipeline = [](double wrong_for) {
        return view(4, {p2p_rank(0, {peer(1, 41, 41, 41, 40, 20.0)}),
                        p2p_rank(1, {peer(0, 41, 41, 41, 41), peer(2, 41, 41, 41, 40, 20.0)}),
                        p2p_rank(2, {peer(1, 41, 41, 41, 41), peer(3, 40, 40, 40, 40), peer(0, 1, 0, 0, 0, wrong_for)}),
                        p2p_rank(3, {peer(2, 40, 40, 41, 40, 20.0)})});
    };
    auto vs = diagnose_stall(pipeline(15.0), kNow, kTimeout);
    REQUIRE(!vs.empty());
    CHECK(vs[0].kind == Kind::Mismatch);
    CHECK(vs[0].culprits == std::vector<int>{2});
    CHECK(vs[0].op.op == uint8_t(OpType::Send));
    CHECK(vs[0].op.root == 0);                   // its peer
    CHECK(vs[0].stalled_for_s == Approx(15.0));  // its own wait, not the chain's oldest
    CHECK(contains(vs[0].summary, "rank 2 waits 15.0 s in send #1 to rank 0, its first ever to rank 0"));
    CHECK(contains(vs[0].summary, "waiting on rank 2: rank 1 in recv #41 from it, rank 3 in recv #41 from it"));

    SECTION("the wrong send younger than the timeout, the receive that waits on it older: the same verdict") {
        auto young = diagnose_stall(pipeline(5.0), kNow, kTimeout);
        REQUIRE(!young.empty());
        CHECK(young[0].kind == Kind::Mismatch);
        CHECK(young[0].culprits == std::vector<int>{2});
    }
    SECTION("a pipeline's first step: a stage's first receive from the next one is not a wrong peer") {
        auto first = view(
            3, {p2p_rank(0, {peer(1, 1, 1, 1, 0, 20.0)}), p2p_rank(1, {peer(0, 1, 1, 1, 1), peer(2, 1, 0, 0, 0, 20.0)}),
                p2p_rank(2, {peer(1, 0, 0, 1, 0, 20.0)})});
        for (const auto& v : diagnose_stall(first, kNow, kTimeout)) CHECK(!contains(v.summary, "its first ever"));
    }
}

TEST_CASE("verdict: a completed send whose peer's counts are older than it proves no missing receive", "[verdict]") {
    // Rank 0 completed its one send to rank 1 (its last progress 1 s ago); rank 1, which exited, shows no receive from
    // rank 0. Counts of rank 1 taken after that completion contradict it (MISMATCH: rank 1 never posted the receive);
    // counts taken before it (the live collector's last State of rank 1, sent 2 s ago, at the job's start) say
    // nothing of a receive posted since.
    const auto judge = [](double peer_counts_age_s) {
        RankCommState sender = p2p_rank(0, {peer(1, 1, 1, 0, 0)});
        sender.t_last_progress_ns = ago(1.0);
        RankCommState receiver = p2p_rank(1, {peer(0, 0, 0, 0, 0)});
        receiver.exited_clean = true;  // done: it will post nothing more
        receiver.p2p_as_of_ns = ago(peer_counts_age_s);
        return find_mismatches(view(2, {sender, receiver}));
    };
    const auto fresh = judge(0.5);
    REQUIRE(fresh.size() == 1);
    CHECK(fresh[0].kind == Kind::Mismatch);
    CHECK(fresh[0].culprits == Ranks{1});
    CHECK(contains(fresh[0].summary, "rank 0 completed 1 send to rank 1, but rank 1 posted only 0 receives"));
    CHECK(judge(2.0).empty());
}

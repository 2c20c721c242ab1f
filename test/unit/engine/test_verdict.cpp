// The verdict engine on hand-built communicator views: one scenario per entry of the field notes' failure catalogue.
// Stalls here; mismatches in test_verdict_mismatch.cpp, point-to-point and init in test_verdict_p2p_init.cpp.
#include "verdict_fixtures.h"

using namespace verdict_fixtures;

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
    SECTION("died after its part of the op: the others stuck in it wait for the dead rank, not the transport") {
        // The live collector at two nodes (rank_dies): rank 3 exited with code 3 after completing #42 (its kernel
        // ended; its proxy's last sends may never have gone); rank 1's GPU is inside #42 past the timeout.
        auto r3 = idle(3, 44, 12.0);
        r3.alive = false;
        r3.end_kind = uint32_t(ncw::disk::EndKind::Exit);
        r3.end_status = 3;
        auto vs =
            diagnose_stall(view(4, {idle(0, 42, 12.0), waiting(1, 41, 12.0), idle(2, 43, 12.0), r3}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].seq == 42);
        CHECK(vs[0].culprits == Ranks{3});
        CHECK(contains(vs[0].summary,
                       "rank 3 exited (exit code 3) after its part of #42 (completed #44): the others "
                       "cannot complete #42 without it"));
        CHECK(find_kind(vs, Kind::StuckInNccl) == nullptr);

        // The same through sys.exit(1) or an uncaught exception (torch.OutOfMemoryError at one node): the exit
        // handlers ran, and the exit code says it was no clean end.
        r3.exited_clean = true;
        r3.end_status = 1;
        vs = diagnose_stall(view(4, {idle(0, 42, 12.0), waiting(1, 41, 12.0), idle(2, 43, 12.0), r3}), kNow, kTimeout);
        REQUIRE(!vs.empty());
        CHECK(vs[0].kind == Kind::Dead);
        CHECK(vs[0].culprits == Ranks{3});
        CHECK(contains(vs[0].summary, "rank 3 exited (exit code 1) after its part of #42"));
        r3.exited_clean = false;

        // One that exited 0 after completing all it issued died of nothing: not DEAD (type_mismatch at two nodes:
        // rank 3's Broadcast paired with the others' AllReduce, it finished its loop and left).
        r3.end_status = 0;
        vs = diagnose_stall(view(4, {idle(0, 42, 12.0), waiting(1, 41, 12.0), idle(2, 43, 12.0), r3}), kNow, kTimeout);
        CHECK(find_kind(vs, Kind::Dead) == nullptr);
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

// NCCLWATCH_GPU_SAMPLE=auto: ops from `first` to the rank's last issued carried no GPU events of their own, so the
// rank's counts are lower bounds.
void sampled_out_from(RankCommState& r, uint64_t first) {
    r = lower_bounds(r);
    for (auto& g : r.recent.mut())
        if (g.seq >= first) g.flags |= ncw::disk::kFlagSampledOut;
}

TEST_CASE("verdict: an op without GPU events of its own is not called unreached", "[verdict][sampling]") {
    SECTION("a lone rank: the reach not known, neither GPU_NOT_REACHED nor STUCK_IN_NCCL") {
        auto r0 = waiting(0, 44, 12.0);
        r0.reached = 44;
        sampled_out_from(r0, 45);
        auto vs = diagnose_stall(view(1, {r0}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].kind == Kind::Unknown);
        CHECK(vs[0].seq == 45);
        CHECK(vs[0].culprits.empty());
        CHECK(contains(vs[0].summary,
                       "whether the GPU of rank 0 reached #45 is not known: its counts are lower "
                       "bounds (CUDA events, sampled)"));
        CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                          [](const std::string& e) { return contains(e, "NCCLWATCH_GPU_SAMPLE"); }));
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
            for (auto& g : r->recent.mut())
                if (g.seq == 41) g.op = uint8_t(OpType::Broadcast), g.root = 2;
        auto bs = diagnose_stall(view(3, {b0, b1, b2}), kNow, kTimeout);
        REQUIRE(!bs.empty());
        CHECK(bs[0].seq == 41);
    }
    SECTION("also over an op with events of its own: a process gone before its poller saw them") {
        auto c0 = r0;
        for (auto& g : c0.recent.mut()) g.flags = 0;
        c0.alive = false;  // died right after its GPU finished #41; rank 2's completion of #41 proves it
        auto cs = diagnose_stall(view(3, {c0, r1, idle(2, 41)}), kNow, kTimeout);
        REQUIRE(!cs.empty());
        CHECK(cs[0].seq == 42);
    }
    SECTION("not past an op whose signature differs on the peer") {
        auto d2 = idle(2, 41);
        for (auto& g : d2.recent.mut())
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
        for (auto& s : r0.recent.mut())
            if (s.seq == 42) s.t_issue_ns = ago(25.0);
        auto vs = diagnose_stall(view(2, {r0, idle(1, 41)}), kNow, kTimeout);
        REQUIRE(vs.size() == 1);
        CHECK(vs[0].stalled_for_s == Approx(25.0).margin(0.01));
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

// Issue 28, point 4: a communicator's size is a claim (a forged file or frame says 2^20). The ranks it claims and no
// file shows are named in runs, so that a line stays a line; short lists keep every rank.
TEST_CASE("verdict: ranks a claimed size adds are named in runs", "[verdict]") {
    auto v = view(1 << 20, {waiting(0, 41, 12.3), waiting(1, 41, 12.0)});
    auto vs = diagnose_stall(v, kNow, kTimeout);
    REQUIRE(!vs.empty());
    CHECK(vs[0].missing.size() == (1u << 20) - 2);
    for (const auto& d : vs)
        for (const auto& e : d.evidence) CHECK(e.size() < 200);
    CHECK(std::any_of(vs[0].evidence.begin(), vs[0].evidence.end(),
                      [](const std::string& e) { return contains(e, "ranks 2-1048575 of 1048576"); }));
    auto few = diagnose_stall(view(5, {waiting(0, 41, 12.3), waiting(1, 41, 12.0)}), kNow, kTimeout);
    REQUIRE(!few.empty());
    CHECK(std::any_of(few[0].evidence.begin(), few[0].evidence.end(),
                      [](const std::string& e) { return contains(e, "ranks 2,3,4 of 5"); }));
}

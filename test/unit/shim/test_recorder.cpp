// The recorder (shim/record/recorder.cpp, ring_publish.cpp) alone, one thread: what record_issue / record_return /
// record_done / record_failed and the poller's CompletionBatch leave in a rank file, read back as a sibling reads it
// (lib/read's RankFile): the ring records, sequence numbers, the progress block's counters, the first failure, the
// signature window, a ring that wraps. (Concurrent writers and a lap overtaking a writer: test_ring.cpp.)
#include <array>
#include <catch2/catch.hpp>

#include "read/rank_file.h"
#include "shim/record/recorder.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;
using disk::OpType;

namespace {

cudaStream_t stream(uintptr_t v) { return reinterpret_cast<cudaStream_t>(v); }

// A progress block's issue side: coll_issued, ops_issued, p2p_sends, p2p_recvs, t_last_issue_ns.
using Issued = std::array<uint64_t, 5>;
Issued issued(const CommInfo& c) { return {c.coll_issued, c.ops_issued, c.p2p_sends, c.p2p_recvs, c.t_last_issue_ns}; }
// Its completion side: coll_reached, coll_completed, ops_completed, t_last_progress_ns.
using Done = std::array<uint64_t, 4>;
Done done(const CommInfo& c) { return {c.coll_reached, c.coll_completed, c.ops_completed, c.t_last_progress_ns}; }
// Its failures: ops_failed, and the first one's seq and result.
using Failed = std::array<int64_t, 3>;
Failed failed(const CommInfo& c) {
    return {int64_t(c.ops_failed), int64_t(c.first_failed_seq), int64_t(c.first_failed_result)};
}

struct Fixture {
    TempDir dir{"ncw_recorder"};
    RankFileWriter f;
    RankFile rf;
    explicit Fixture(uint32_t ring = 256, uint32_t bt_depth = 0) {
        f = create_rank_file(dir.path.string(), test_identity("rectest"), ring, bt_depth);
        REQUIRE(f.file_backed);
    }
    std::vector<Record> records() {
        if (!rf.is_open()) REQUIRE(rf.open(f.path));
        RecordSet rs = rf.records();
        CHECK(rs.torn == 0);
        return rs.records;
    }
    CommInfo comm(uint32_t slot) {
        if (!rf.is_open()) REQUIRE(rf.open(f.path));
        for (const CommInfo& c : rf.comms())
            if (c.slot == slot) return c;
        FAIL("no comm in slot " << slot);
        return {};
    }
};

}  // namespace

TEST_CASE("a collective's ring record holds what the wrapper saw, then its return and completion times") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0xc0ffee, 0, 1, 4);
    cr->nonblocking = true;
    int sendbuf = 0, recvbuf = 0;
    const OpDesc d{OpType::AllReduce, &sendbuf, &recvbuf, 4096, 7, 0, -1, nullptr, stream(0x5000)};
    IssueOptions opt;
    opt.tid = 4321;
    opt.group_id = 9;
    opt.flags = disk::kFlagInGroup;
    const OpRef ref = record_issue(x.f, *cr, d, opt, 1000);
    CHECK(ref.cr == cr);
    CHECK(ref.coll_seq == 1);
    CHECK(ref.op_index == 1);
    CHECK(ref.ticket == 0);

    std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 1);
    Record r = rs[0];
    CHECK(r.comm_id == 0xc0ffee);
    CHECK(r.seq == 1);
    CHECK(r.op_index == 1);
    CHECK(r.op == uint8_t(OpType::AllReduce));
    CHECK(r.count == 4096);
    CHECK(r.dtype == 7);
    CHECK(r.redop == 0);
    CHECK(r.peer_or_root == -1);
    CHECK(r.sendbuf == reinterpret_cast<uint64_t>(&sendbuf));
    CHECK(r.recvbuf == reinterpret_cast<uint64_t>(&recvbuf));
    CHECK(r.stream == 0x5000);
    CHECK(r.tid == 4321);
    CHECK(r.group_id == 9);
    CHECK(r.flags == (disk::kFlagInGroup | disk::kFlagNonBlocking));
    CHECK(r.comm_slot == 0);
    CHECK(r.comm_nranks == 4);
    CHECK(r.comm_rank == 1);
    CHECK(r.t_issue_ns == 1000);
    CHECK(r.t_return_ns == 0);
    CHECK(r.t_reached_ns == 0);
    CHECK(r.t_done_ns == 0);
    CHECK(r.result == -1);  // not returned yet

    record_return(x.f, ref, ncclSuccess, 1100);
    r = x.records()[0];
    CHECK(r.t_return_ns == 1100);
    CHECK(r.result == 0);
    CHECK(x.comm(0).coll_returned == 1);
    CHECK(x.comm(0).coll_completed == 0);

    record_done(x.f, ref, 1500);
    r = x.records()[0];
    CHECK(r.t_done_ns == 1500);
    CHECK(r.t_reached_ns == 1500);  // a completed op was necessarily reached
    CHECK(done(x.comm(0)) == Done{1, 1, 1, 1500});
}

TEST_CASE("sequence numbers: collectives per communicator, p2p per peer and direction, op_index over all") {
    Fixture x;
    CommRuntime* a = make_comm(x.f, 0xa, 0, 0, 4);
    CommRuntime* b = make_comm(x.f, 0xb, 1, 0, 4);
    IssueOptions opt;
    record_issue(x.f, *a, coll(OpType::AllReduce, 8), opt, 10);
    record_issue(x.f, *b, coll(OpType::Broadcast, 8, nullptr, 2), opt, 11);
    record_issue(x.f, *a, p2p(OpType::Send, 1), opt, 12);
    record_issue(x.f, *a, p2p(OpType::Send, 2), opt, 13);
    record_issue(x.f, *a, p2p(OpType::Recv, 1), opt, 14);
    record_issue(x.f, *a, p2p(OpType::Send, 1), opt, 15);
    record_issue(x.f, *a, coll(OpType::AllGather, 8), opt, 16);
    record_issue(x.f, *b, coll(OpType::Broadcast, 8, nullptr, 2), opt, 17);
    record_issue(x.f, *a, p2p(OpType::Send, 5), opt, 18);  // peer 5 of 4 counts as peer 1: its third send

    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 9);
    const uint64_t seqs[] = {1, 1, 1, 1, 1, 2, 2, 2, 3};
    const uint64_t op_index[] = {1, 1, 2, 3, 4, 5, 6, 2, 7};
    const uint64_t comm[] = {0xa, 0xb, 0xa, 0xa, 0xa, 0xa, 0xa, 0xb, 0xa};
    for (size_t i = 0; i < rs.size(); ++i) {
        INFO("record " << i);
        CHECK(rs[i].ticket == i);
        CHECK(rs[i].seq == seqs[i]);
        CHECK(rs[i].op_index == op_index[i]);
        CHECK(rs[i].comm_id == comm[i]);
        CHECK(rs[i].t_issue_ns == 10 + i);
    }
    CHECK(rs[1].peer_or_root == 2);
    CHECK(rs[1].redop == -1);
    CHECK(rs[3].peer_or_root == 2);
    CHECK(issued(x.comm(0)) == Issued{2, 7, 4, 1, 18});
    CHECK(issued(x.comm(1)) == Issued{2, 2, 0, 0, 17});
    CHECK(x.f.hdr->write_ticket.load() == disk::kRingChunk);  // one chunk for this thread (ring_publish.h)
}

TEST_CASE("a communicator without a comm slot counts in its runtime and records none in a slot") {
    Fixture x;
    auto* cr = new CommRuntime;
    cr->comm_id = 0x77;
    cr->rank = 0;
    cr->nranks = 2;
    const OpRef first = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 5);
    const OpRef second = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 6);
    CHECK(first.coll_seq == 1);
    CHECK(second.coll_seq == 2);
    CHECK(second.op_index == 2);
    record_return(x.f, second, ncclSuccess, 7);
    record_done(x.f, second, 8);
    record_failed(x.f, first, ncclSystemError, 9);  // nothing to count it in: no crash
    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 2);
    CHECK(rs[1].comm_slot == kNoCommSlot);
    CHECK(rs[1].seq == 2);
    CHECK(rs[1].t_done_ns == 8);
    CHECK(cr->coll_seq.load() == 2);
}

TEST_CASE("returns keep the highest returned collective; completion without progress leaves the clock") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x1);
    const OpRef r1 = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 100);
    const OpRef r2 = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 200);
    record_return(x.f, r2, ncclSuccess, 250);
    record_return(x.f, r1, ncclInProgress, 260);
    CHECK(x.comm(0).coll_returned == 2);
    CHECK(x.records()[0].result == int32_t(ncclInProgress));
    // The idle communicator's first op started the clock at its issue.
    CHECK(x.comm(0).t_last_progress_ns == 100);
    // The second completes first, counted done without GPU evidence: the count moves, the stall clock does not, and
    // the count still says one op is outstanding behind the highest completed seq.
    record_done(x.f, r2, 300, false);
    CHECK(done(x.comm(0)) == Done{2, 2, 1, 100});
    CHECK(x.records()[1].t_done_ns == 300);
    record_done(x.f, r1, 400);
    CHECK(done(x.comm(0)) == Done{2, 2, 2, 400});
}

TEST_CASE("a failed call is counted failed, never completed; the first failure is kept") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x2);
    const OpRef ok = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 100);
    record_return(x.f, ok, ncclSuccess, 110);
    record_done(x.f, ok, 120);
    const OpRef bad = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 200);
    record_return(x.f, bad, ncclRemoteError, 210);
    record_failed(x.f, bad, ncclRemoteError, 210);
    const OpRef bad2 = record_issue(x.f, *cr, p2p(OpType::Send, 1), IssueOptions{}, 300);
    record_return(x.f, bad2, ncclSystemError, 310);
    record_failed(x.f, bad2, ncclSystemError, 310);

    const CommInfo c = x.comm(0);
    CHECK(c.ops_issued == 3);
    CHECK(done(c) == Done{1, 1, 1, 200});  // the failed op's issue into the idle communicator started the clock
    CHECK(failed(c) == Failed{2, 2, ncclRemoteError});
    CHECK(x.f.comms[0].t_first_failed_ns.load() == 210);
    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 3);
    CHECK(record_failed(rs[1]));
    CHECK(rs[1].t_done_ns == 0);
    CHECK(record_failed(rs[2]));
    CHECK_FALSE(record_failed(rs[0]));
    // An asynchronous error after that is no new first failure.
    CHECK_FALSE(record_async_failed(*cr, ncclRemoteError, 400));
    CHECK(x.comm(0).ops_failed == 2);
}

TEST_CASE("an asynchronous error is the first failure once, at the oldest collective not completed") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x3);
    for (uint64_t i = 0; i < 3; ++i) {
        const OpRef ref = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 100 + i);
        record_return(x.f, ref, ncclSuccess, 150 + i);
        if (i == 0) record_done(x.f, ref, 200);
    }
    CHECK(record_async_failed(*cr, ncclRemoteError, 500));
    CHECK_FALSE(record_async_failed(*cr, ncclSystemError, 600));
    CHECK(failed(x.comm(0)) == Failed{1, 2, ncclRemoteError});
    CHECK(cr->failed_ops.load() == 1);
    CHECK(x.f.comms[0].t_first_failed_ns.load() == 500);

    // Nothing outstanding: a failure at no collective (seq 0); time 0 is stored as 1 (0 means none).
    CommRuntime* idle = make_comm(x.f, 0x4, 1);
    const OpRef ref = record_issue(x.f, *idle, coll(OpType::AllReduce, 8), IssueOptions{}, 100);
    record_done(x.f, ref, 110);
    CHECK(record_async_failed(*idle, ncclRemoteError, 0));
    CHECK(x.comm(1).first_failed_seq == 0);
    CHECK(x.f.comms[1].t_first_failed_ns.load() == 1);
}

TEST_CASE("the signature window holds the recent collectives' shapes, and is told which were sampled out") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x5);
    IssueOptions opt;
    opt.tid = 77;
    std::vector<OpRef> refs;
    for (uint64_t i = 1; i <= disk::kRecentSigs + 6; ++i) {
        OpDesc d = coll(i % 2 ? OpType::AllReduce : OpType::Reduce, i * 100, stream(0x9000 + i), i % 2 ? -1 : 3);
        if (i == disk::kRecentSigs + 2) d.redop = int(ncclNumOps) + 5;  // a premulsum handle, mangled per comm
        refs.push_back(record_issue(x.f, *cr, d, opt, 1000 * i));
    }
    // Between the issue and the completion: no event could be had (untracked), or it follows the sample in flight.
    record_add_flags(x.f, refs.back(), disk::kFlagSampledOut);
    record_add_flags(x.f, refs[refs.size() - 2], disk::kFlagUntracked);
    record_add_flags(x.f, refs[0], disk::kFlagSampledOut);  // its signature was overwritten: untouched

    const CommInfo c = x.comm(0);
    REQUIRE(c.recent.size() == disk::kRecentSigs);
    CHECK(c.recent.front().seq == 7);
    for (const SigInfo& s : c.recent) {
        INFO("seq " << s.seq);
        const bool reduce = s.seq % 2 == 0;
        CHECK(s.op == uint8_t(reduce ? OpType::Reduce : OpType::AllReduce));
        CHECK(s.count == s.seq * 100);
        CHECK(s.t_issue_ns == 1000 * s.seq);
        CHECK(s.stream == 0x9000 + s.seq);
        CHECK(s.root == (reduce ? 3 : -1));
        CHECK(s.tid == 77);
        CHECK(s.dtype == 7);
        CHECK(s.redop == (s.seq == disk::kRecentSigs + 2 ? int32_t(ncclNumOps) : 0));
        CHECK(s.flags == (s.seq == disk::kRecentSigs + 6 ? disk::kFlagSampledOut : 0));
    }
    CHECK(x.records()[disk::kRecentSigs + 1].redop == int32_t(ncclNumOps));
    CHECK(c.untracked_ops == 1);
    const std::vector<Record> rs = x.records();
    CHECK(rs.back().flags == disk::kFlagSampledOut);
    CHECK(rs[rs.size() - 2].flags == disk::kFlagUntracked);
    CHECK(rs[0].flags == disk::kFlagSampledOut);  // the record itself still there
}

TEST_CASE("a ring that wraps keeps the newest records; a late completion of an overwritten one touches none") {
    Fixture x(disk::kMinRingCapacity);
    CommRuntime* cr = make_comm(x.f, 0x6);
    std::vector<OpRef> refs;
    const uint64_t n = disk::kMinRingCapacity + 48;  // whole chunks of the ring (ring_publish.h)
    for (uint64_t i = 0; i < n; ++i) {
        refs.push_back(record_issue(x.f, *cr, coll(OpType::AllReduce, i), IssueOptions{}, 10 + i));
        if (i >= 10) record_done(x.f, refs.back(), 20 + i);
    }
    // Ticket 3's slot now holds ticket 3 + 256: completing ticket 3 counts it, and leaves that record alone.
    record_return(x.f, refs[3], ncclSuccess, 99999);
    record_done(x.f, refs[3], 99999);
    REQUIRE(x.rf.open(x.f.path));
    const RecordSet rs = x.rf.records();
    REQUIRE(rs.records.size() == disk::kMinRingCapacity);
    CHECK(rs.dropped == 48);
    CHECK(rs.first_ticket == 48);
    CHECK(rs.torn == 0);
    CHECK(rs.unwritten == 0);
    for (const Record& r : rs.records) {
        INFO("ticket " << r.ticket);
        CHECK(r.seq == r.ticket + 1);
        CHECK(r.count == r.ticket);
        CHECK(r.t_done_ns == 20 + r.ticket);
        CHECK(r.t_return_ns == 0);
    }
    const CommInfo c = x.comm(0);
    CHECK(c.coll_issued == n);
    CHECK(c.ops_completed == n - 10 + 1);
}

TEST_CASE("the completion poller's batch reaches the progress block only at its flush") {
    Fixture x;
    CommRuntime* a = make_comm(x.f, 0xa1, 0);
    CommRuntime* b = make_comm(x.f, 0xb1, 1);
    std::vector<OpRef> ra, rb;
    for (int i = 0; i < 4; ++i) ra.push_back(record_issue(x.f, *a, coll(OpType::AllReduce, 8), IssueOptions{}, 10));
    for (int i = 0; i < 2; ++i) rb.push_back(record_issue(x.f, *b, coll(OpType::AllGather, 8), IssueOptions{}, 10));
    CompletionBatch batch;
    batch.reached(x.f, ra[0], 100);
    batch.done(x.f, ra[0], 110);
    batch.reached(x.f, ra[2], 120, false);  // a mark's op: its record's time only
    batch.followers_done(a->slot, 1, 2);    // op 2 followed op 1 on its stream
    batch.done(x.f, rb[0], 130, false);     // counted done without GPU evidence
    // Nothing in the progress blocks yet; the records' own times are written at once.
    CHECK(x.comm(0).ops_completed == 0);
    CHECK(x.comm(0).coll_reached == 0);
    std::vector<Record> rs = x.records();
    CHECK(rs[0].t_done_ns == 110);
    CHECK(rs[0].t_reached_ns == 100);
    CHECK(rs[2].t_reached_ns == 120);
    CHECK(rs[2].t_done_ns == 0);
    batch.flush(200);
    CHECK(done(x.comm(0)) == Done{2, 2, 2, 200});  // reached 2, not 3: the mark's op only got its record's time
    CHECK(done(x.comm(1)) == Done{1, 1, 1, 10});   // no progress proven: the clock stays at the issue
    // A flushed batch is empty.
    batch.flush(300);
    CHECK(x.comm(0).t_last_progress_ns == 200);
    batch.followers_done(a->slot, 0, 4);  // no followers: nothing
    batch.followers_done(nullptr, 3, 4);  // no slot: nothing
    batch.flush(400);
    CHECK(x.comm(0).ops_completed == 2);
}

TEST_CASE("lifecycle events are records without a sequence number") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x8, 0, 1, 2);
    record_event(x.f, cr, 0x8, OpType::CommInit, ncclSuccess, 5, 1000);
    record_event(x.f, nullptr, 0x9, OpType::CommDestroy, ncclInvalidArgument, -1, 2000);
    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].op == uint8_t(OpType::CommInit));
    CHECK(rs[0].seq == 0);
    CHECK(rs[0].op_index == 0);
    CHECK(rs[0].comm_slot == 0);
    CHECK(rs[0].comm_rank == 1);
    CHECK(rs[0].peer_or_root == 5);
    CHECK(rs[0].t_issue_ns == 1000);
    CHECK(rs[0].t_return_ns == 1000);
    CHECK(rs[0].result == 0);
    CHECK(rs[0].tid != 0);
    CHECK(rs[1].comm_id == 0x9);
    CHECK(rs[1].comm_slot == kNoCommSlot);
    CHECK(rs[1].comm_nranks == 0);
    CHECK(rs[1].result == int32_t(ncclInvalidArgument));
    CHECK(x.comm(0).ops_issued == 0);
}

namespace {
int fake_backtrace(void** frames, int depth) {
    for (int i = 0; i < depth && i < 3; ++i) frames[i] = reinterpret_cast<void*>(uintptr_t(0x1000 + i));
    return depth < 3 ? depth : 3;
}
}  // namespace

TEST_CASE("with backtraces on, the caller's frames go with the record") {
    Fixture x(256, 8);
    CommRuntime* cr = make_comm(x.f, 0xbb);
    IssueOptions opt;
    opt.backtrace = fake_backtrace;
    record_issue(x.f, *cr, coll(OpType::AllReduce, 8), opt, 10);
    record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 20);
    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].flags == disk::kFlagHasBacktrace);
    CHECK(rs[1].flags == 0);
    CHECK(x.rf.backtrace(0) == std::vector<uint64_t>{0x1000, 0x1001, 0x1002});
}

// Without GPU tracking the issuing thread is its communicator's only completer (Runtime::completes_on_return): the
// return and the completion in one call, stamped with the time it is given (the op's issue time on the hot path).
TEST_CASE("a return that completes the op writes the record and the progress block in one call") {
    Fixture x;
    CommRuntime* cr = make_comm(x.f, 0x77);
    const OpRef a = record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 500);
    record_returned_done(x.f, a, 500);
    const OpRef b = record_issue(x.f, *cr, coll(OpType::AllGather, 16), IssueOptions{}, 700);
    record_returned_done(x.f, b, 700);
    const std::vector<Record> rs = x.records();
    REQUIRE(rs.size() == 2);
    for (const Record& r : rs) {
        CHECK(r.result == 0);
        CHECK(r.t_return_ns == r.t_issue_ns);
        CHECK(r.t_reached_ns == r.t_issue_ns);
        CHECK(r.t_done_ns == r.t_issue_ns);
    }
    const CommInfo c = x.comm(0);
    CHECK(c.coll_returned == 2);
    CHECK(done(c) == Done{2, 2, 2, 700});
    // The next op into the now idle communicator starts the stall clock at its own issue.
    record_issue(x.f, *cr, coll(OpType::AllReduce, 8), IssueOptions{}, 900);
    CHECK(x.comm(0).t_last_progress_ns == 900);
}

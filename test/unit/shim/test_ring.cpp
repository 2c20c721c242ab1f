// The ring under concurrent writers (two threads issue on one communicator, like torch's main and autograd
// threads) and a concurrent reader in the role of a sibling process.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <thread>

#include "read/rank_file.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"
#include "shim/record/ring_publish.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;

namespace {

constexpr uint64_t kMarker = 0x5a5a5a5a12345678ull;

OpDesc desc_for(uint64_t value) {
    return OpDesc{disk::OpType::AllReduce,
                  reinterpret_cast<const void*>(value ^ kMarker),
                  nullptr,
                  size_t(value),
                  7,
                  0,
                  -1,
                  nullptr,
                  reinterpret_cast<cudaStream_t>(value)};
}

}  // namespace

TEST_CASE("records survive concurrent writers and a concurrent reader") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 1024, 0);
    REQUIRE(f.file_backed);
    CommRuntime* cr = make_comm(f, 0xabcdef);

    constexpr int kThreads = 4;
    constexpr uint64_t kPerThread = 20000;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> reads{0}, bad{0};
    std::thread reader([&] {
        RankFile rf;
        REQUIRE(rf.open(f.path));
        while (!stop.load()) {
            RecordSet rs = rf.records();
            for (const Record& r : rs.records) {
                // Every field written at issue time must come from the same write.
                if (r.sendbuf != (r.count ^ kMarker) || r.stream != r.count || r.comm_id != 0xabcdef) bad++;
            }
            reads++;
        }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t)
        writers.emplace_back([&, t] {
            for (uint64_t i = 0; i < kPerThread; ++i) {
                OpRef ref = record_issue(f, *cr, desc_for((uint64_t(t) << 32) | i), IssueOptions{}, 1000 + i);
                record_return(f, ref, ncclSuccess, 2000 + i);
                record_done(f, ref, 3000 + i);
            }
        });
    for (auto& w : writers) w.join();
    // Wait for at least one full read after the writers finished, not for a fixed time.
    uint64_t target = reads.load() + 2;
    while (reads.load() < target) std::this_thread::yield();
    stop = true;
    reader.join();

    CHECK(bad.load() == 0);
    RankFile rf;
    REQUIRE(rf.open(f.path));
    RecordSet rs = rf.records();
    CHECK(rs.records.size() == 1024);
    CHECK(rs.dropped == kThreads * kPerThread - 1024);
    CHECK(rs.torn == 0);
    // Sequence numbers are unique across threads and contiguous.
    std::set<uint64_t> seqs;
    for (const Record& r : rs.records) seqs.insert(r.seq);
    CHECK(seqs.size() == 1024);
    CHECK(*seqs.rbegin() == kThreads * kPerThread);
    CHECK(f.comms[0].coll_issued.load() == kThreads * kPerThread);
    CHECK(f.comms[0].coll_completed.load() == kThreads * kPerThread);
    CHECK(f.comms[0].ops_completed.load() == kThreads * kPerThread);
}

// A writer delayed between taking its ticket and writing its record while the ring goes a whole lap (ring_publish.h):
// played here by publishing an old ticket's record by hand.
TEST_CASE("a writer overtaken by a lap of the ring drops its record instead of writing over a newer one") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 256, 0);
    CommRuntime* cr = make_comm(f, 0xabcdef);
    for (uint64_t i = 0; i < 257; ++i) record_issue(f, *cr, desc_for(i), IssueOptions{}, 1000 + i);
    disk::OpRecord late{};
    late.comm_id = 0xdead;
    late.count = 12345;
    late.op = uint8_t(disk::OpType::AllReduce);
    // Ticket 0's slot holds ticket 256's record, published.
    CHECK_FALSE(publish_record(f, 0, late, nullptr, 0));
    // Ticket 300's slot still holds ticket 44's record, but ticket 556 (its next lap) has been handed out.
    f.hdr->write_ticket.store(600);
    CHECK_FALSE(publish_record(f, 300, late, nullptr, 0));
    f.hdr->write_ticket.store(257);
    RankFile rf;
    REQUIRE(rf.open(f.path));
    RecordSet rs = rf.records();
    REQUIRE(rs.records.size() == 256);
    CHECK(rs.torn == 0);
    for (const Record& r : rs.records) {
        CHECK(r.comm_id == 0xabcdef);
        CHECK(r.count == r.ticket);
    }
    // A ticket whose slot holds an older lap's record is published.
    f.hdr->write_ticket.store(258);
    CHECK(publish_record(f, 257, late, nullptr, 0));
    rs = rf.records();
    REQUIRE(rs.records.size() == 256);
    CHECK(rs.records.back().ticket == 257);
    CHECK(rs.records.back().count == 12345);
    if (!ring_publish_restartable()) WARN("no restartable sequences here: records are published by the plain copy");
}

TEST_CASE("p2p sequence numbers count per peer and direction") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 256, 0);
    CommRuntime* cr = make_comm(f, 0x77);
    auto p2p = [&](disk::OpType op, int peer) {
        OpDesc d{op, nullptr, nullptr, 16, 7, -1, peer, nullptr, nullptr};
        return record_issue(f, *cr, d, IssueOptions{}, 1);
    };
    p2p(disk::OpType::Send, 1);
    p2p(disk::OpType::Send, 1);
    p2p(disk::OpType::Recv, 1);
    OpRef last = p2p(disk::OpType::Send, 1);
    CHECK(last.coll_seq == 0);
    CHECK(last.op_index == 4);
    RankFile rf;
    REQUIRE(rf.open(f.path));
    auto recs = rf.records().records;
    REQUIRE(recs.size() == 4);
    CHECK(recs[0].seq == 1);
    CHECK(recs[1].seq == 2);
    CHECK(recs[2].seq == 1);  // first recv from peer 1
    CHECK(recs[3].seq == 3);
    CHECK(f.comms[0].coll_issued.load() == 0);
    CHECK(f.comms[0].ops_issued.load() == 4);
}

TEST_CASE("signatures of recent collectives are readable by a sibling") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 256, 0);
    CommRuntime* cr = make_comm(f, 0x99);
    for (uint64_t i = 1; i <= 100; ++i) record_issue(f, *cr, desc_for(i * 10), IssueOptions{}, i);
    RankFile rf;
    REQUIRE(rf.open(f.path));
    auto comms = rf.comms();
    REQUIRE(comms.size() == 1);
    REQUIRE(comms[0].recent.size() == disk::kRecentSigs);
    CHECK(comms[0].recent.back().seq == 100);
    CHECK(comms[0].recent.back().count == 1000);
    CHECK(comms[0].recent.front().seq == 100 - disk::kRecentSigs + 1);
}

TEST_CASE("an unusable folder falls back to memory without failing") {
    RankFileWriter f = create_rank_file("/proc/forbidden/ncclwatch", test_identity(), 256, 0);
    CHECK_FALSE(f.file_backed);
    REQUIRE(f.hdr != nullptr);
    CommRuntime* cr = make_comm(f, 0x1);
    OpRef ref = record_issue(f, *cr, desc_for(1), IssueOptions{}, 1);
    record_done(f, ref, 2);
    CHECK(f.comms[0].coll_completed.load() == 1);
}

namespace {
// What a watchdog poll reads of the slot while the issuing thread is between its steps (the backtrace runs after the
// op is counted issued, before the record is published).
const disk::CommSlot* g_watched = nullptr;
uint64_t g_seen_issued = 0, g_seen_since = 0;
int watch_mid_issue(void**, int) {
    g_seen_issued = g_watched->ops_issued.load();
    g_seen_since = g_watched->t_last_progress_ns.load();
    return 0;
}
}  // namespace

// A thread preempted inside record_issue must not leave its op outstanding against the idle communicator's old clock:
// the watchdog read that as a stall of the whole idle time ("no completion for 60367 s" on a new communicator).
TEST_CASE("an op issued into an idle communicator starts the stall clock before it counts as outstanding") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 256, 8);
    REQUIRE(f.frames != nullptr);
    CommRuntime* cr = make_comm(f, 0x77);
    g_watched = &f.comms[0];
    IssueOptions opt;
    opt.backtrace = watch_mid_issue;
    OpRef first = record_issue(f, *cr, desc_for(1), opt, 5000);  // a new communicator's first op
    CHECK(g_seen_issued == 1);
    CHECK(g_seen_since == 5000);
    record_done(f, first, 6000);
    OpRef second = record_issue(f, *cr, desc_for(2), opt, 90000);  // after an idle spell
    CHECK(g_seen_issued == 2);
    CHECK(g_seen_since == 90000);
    // Into a busy communicator: the clock stays at the last progress.
    record_issue(f, *cr, desc_for(3), opt, 95000);
    CHECK(g_seen_since == 90000);
    record_done(f, second, 96000);
}

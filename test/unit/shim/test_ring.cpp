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
    // One communicator per thread: NCCL lets one thread at a time use a communicator (its counters have one writer),
    // while the ring is shared by every thread of the process.
    constexpr int kThreads = 4;
    constexpr uint64_t kPerThread = 20000;
    std::vector<CommRuntime*> comms;
    for (int t = 0; t < kThreads; ++t) comms.push_back(make_comm(f, 0xabc000 + uint64_t(t), uint16_t(t)));
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> reads{0}, bad{0};
    std::thread reader([&] {
        RankFile rf;
        REQUIRE(rf.open(f.path));
        while (!stop.load()) {
            RecordSet rs = rf.records();
            for (const Record& r : rs.records) {
                // Every field written at issue time must come from the same write.
                if (r.sendbuf != (r.count ^ kMarker) || r.stream != r.count || r.comm_id != 0xabc000 + (r.count >> 32))
                    bad++;
            }
            reads++;
        }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t)
        writers.emplace_back([&, t] {
            for (uint64_t i = 0; i < kPerThread; ++i) {
                OpRef ref =
                    record_issue(f, *comms[size_t(t)], desc_for((uint64_t(t) << 32) | i), IssueOptions{}, 1000 + i);
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
    // A thread that was off the CPU while the others wrote half the ring leaves the rest of its chunk unwritten
    // (ring_publish.h): every ticket of the last lap is a record or counted unwritten, none torn.
    CHECK(rs.records.size() + rs.unwritten == 1024);
    CHECK(rs.records.size() >= 1024 - kThreads * disk::kRingChunk);
    CHECK(rs.torn == 0);
    CHECK(rs.write_ticket % disk::kRingChunk == 0);
    // Sequence numbers are unique per communicator, and the last of each is its count.
    for (int t = 0; t < kThreads; ++t) {
        std::set<uint64_t> seqs;
        for (const Record& r : rs.records)
            if (r.comm_id == comms[size_t(t)]->comm_id) CHECK(seqs.insert(r.seq).second);
        CHECK(comms[size_t(t)]->slot.load()->coll_issued.load() == kPerThread);
        CHECK(comms[size_t(t)]->slot.load()->coll_completed.load() == kPerThread);
        CHECK(comms[size_t(t)]->slot.load()->ops_completed.load() == kPerThread);
    }
}

// Tickets come in chunks to one thread at a time; a chunk half a lap old is left (its slots are handed out again a
// lap on), and its unwritten tickets read as such, never as records.
TEST_CASE("a thread's chunk of the ring: its tickets in order, left once half a lap old") {
    TempDir root("ncw_ring");
    RankFileWriter f = create_rank_file(root.path.string(), test_identity(), 256, 0);
    CommRuntime* main_comm = make_comm(f, 0xabcdef);
    CommRuntime* side_comm = make_comm(f, 0x5151, 1);
    uint64_t side_first = 0, side_second = 0;
    std::thread([&] { side_first = record_issue(f, *side_comm, desc_for(1), IssueOptions{}, 1000).ticket; }).join();
    for (uint64_t i = 0; i < 200; ++i) {
        const OpRef ref = record_issue(f, *main_comm, desc_for(i), IssueOptions{}, 1000 + i);
        CHECK(ref.ticket == disk::kRingChunk + i);  // the main thread's chunks follow the side thread's first
    }
    CHECK(f.hdr->write_ticket.load() == disk::kRingChunk + 208);
    // The side thread's chunk [0, 16) is now more than half a lap (128) behind the head: its next record takes a
    // new chunk, at the head.
    std::thread([&] { side_second = record_issue(f, *side_comm, desc_for(2), IssueOptions{}, 2000).ticket; }).join();
    CHECK(side_first == 0);
    CHECK(side_second == disk::kRingChunk + 208);
    RankFile rf;
    REQUIRE(rf.open(f.path));
    RecordSet rs = rf.records();
    CHECK(rs.unwritten == (disk::kRingChunk - 1) + 8 + (disk::kRingChunk - 1));  // side's two chunks, main's last
    CHECK(rs.torn == 0);
    CHECK(rs.records.size() == 202);
    for (const Record& r : rs.records)
        CHECK(r.comm_id == (r.ticket == 0 || r.ticket == side_second ? 0x5151 : 0xabcdef));

    // Another ring (a new runtime, or a forked child's): its own chunk, from its start.
    RankFileWriter g = create_rank_file(root.path.string(), test_identity(), 256, 0);
    CommRuntime* g_comm = make_comm(g, 0x9);
    CHECK(record_issue(g, *g_comm, desc_for(3), IssueOptions{}, 3000).ticket == 0);
    // And back: a thread keeps one chunk, of one ring, so this is a new chunk of the first, after the side thread's.
    CHECK(record_issue(f, *main_comm, desc_for(4), IssueOptions{}, 3000).ticket == disk::kRingChunk + 224);
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

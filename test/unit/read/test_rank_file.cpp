// The rank-file reader: round trip, versioning, damage (truncation, corruption, torn records), ring wrap-around,
// backtraces; over time (liveness, a racing writer, the environment region) in test_rank_file_live.cpp.
#include "rank_file_fixtures.h"

using namespace rank_file_fixtures;
using namespace ncw;
using disk::OpType;
namespace fs = std::filesystem;

TEST_CASE("fnv1a64 is the standard 64-bit FNV-1a", "[rank_file]") {
    CHECK(fnv1a64("", 0) == 14695981039346656037ull);
    CHECK(fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
    CHECK(fnv1a64("b", 1, fnv1a64("a", 1)) == fnv1a64("ab", 2));
    CHECK(this_boot_id_hash() == this_boot_id_hash());
}

TEST_CASE("round trip: header, comms, signatures, records", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard(10);
    const auto path = dir.file("r0.ncw");
    b.write(path);

    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.error().empty());
    CHECK(f.warnings().empty());
    CHECK_FALSE(f.truncated());

    const HeaderInfo h = f.header();
    CHECK(h.major == 1);
    CHECK(h.pid == 4242);
    CHECK(h.global_rank == 3);
    CHECK(h.local_rank == 1);
    CHECK(h.world_size == 8);
    CHECK(h.host == "node-a");
    CHECK(h.job_id == "job-17");
    CHECK(h.boot_id_hash == 0x1234);
    CHECK(h.nccl_version == 22809);
    CHECK(h.heartbeat_mono_ns == 1100'000000000ull);
    CHECK(h.process_state == uint32_t(disk::ProcessState::Running));
    CHECK(h.num_comms == 2);
    CHECK(h.write_ticket == 10);
    CHECK(h.actual_size == b.file_size);

    const auto comms = f.comms();
    REQUIRE(comms.size() == 2);
    CHECK(comms[0].comm_id == 0xAAAA);
    CHECK(comms[0].rank == 0);
    CHECK(comms[0].nranks == 2);
    CHECK(comms[0].pci_bus_id == "0000:10:00.0");
    CHECK(comms[0].name == "comm-aaaa");
    CHECK(comms[0].coll_issued == 5);
    CHECK(comms[0].coll_completed == 4);
    CHECK(comms[0].t_last_progress_ns == 1089'000000000ull);
    REQUIRE(comms[0].recent.size() == 5);
    for (size_t i = 0; i < 5; ++i) {
        CHECK(comms[0].recent[i].seq == i + 1);
        CHECK(comms[0].recent[i].op == uint8_t(OpType::AllReduce));
        CHECK(comms[0].recent[i].count == 1024);
    }
    CHECK(comms[1].comm_id == 0xBBBB);
    CHECK(comms[1].parent_id == 0xAAAA);
    CHECK(comms[1].recent.size() == 3);

    const RecordSet rs = f.records();
    REQUIRE(rs.records.size() == 10);
    CHECK(rs.write_ticket == 10);
    CHECK(rs.dropped == 0);
    CHECK(rs.torn == 0);
    CHECK(rs.unknown_op == 0);
    CHECK(rs.cut == 0);
    for (uint64_t t = 0; t < 10; ++t) {
        const Record& r = rs.records[t];
        CHECK(r.ticket == t);
        CHECK(r.comm_id == (t % 2 ? 0xBBBBu : 0xAAAAu));
        CHECK(r.seq == t / 2 + 1);
        CHECK(r.count == 100 + t);
        CHECK(r.t_done_ns == r.t_issue_ns + 30);
        CHECK(r.result == 0);
    }
    CHECK(f.records(7).records.size() == 3);
    CHECK(f.backtrace(0).empty());  // no backtrace region

    // to_rank_comm_state copies progress and signatures.
    LivenessContext ctx;
    ctx.live = false;
    ctx.now_mono_ns = h.heartbeat_mono_ns + 1'000000000ull;
    const auto st = to_rank_comm_state(h, comms[0], path, ctx);
    CHECK(st.comm_rank == 0);
    CHECK(st.global_rank == 3);
    CHECK(st.host == "node-a");
    CHECK(st.pid == 4242);
    CHECK(st.file == path);
    CHECK(st.alive);
    CHECK(st.heartbeat_age_s == Approx(1.0));
    CHECK(st.issued == 5);
    CHECK(st.reached == 5);
    CHECK(st.completed == 4);
    CHECK(st.gpu_tracking);
    REQUIRE(st.recent.size() == 5);
    CHECK(st.recent[4].seq == 5);
    CHECK(st.recent[4].dtype == 7);
    CHECK(st.recent[4].stream == 0x5000);
}

TEST_CASE("a newer major version is rejected with a clear message", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard();
    b.hdr().major = 2;
    b.write(dir.file("new.ncw"));
    RankFile f;
    CHECK_FALSE(f.open(dir.file("new.ncw")));
    CHECK(f.error() == "written by a newer ncclwatch (format 2.x); this reader understands 1.x");
    CHECK_FALSE(f.is_open());
    CHECK(f.comms().empty());
    CHECK(f.records().records.empty());
}

TEST_CASE("a newer minor version with bigger structures still reads", "[rank_file]") {
    TempDir dir;
    FileBuilder b(256, 4, 0, sizeof(disk::CommSlot) + 64, 192);
    b.hdr().minor = 7;
    b.standard(300);  // wraps: 300 records in 256 slots
    // A record kind added by that minor: skipped and counted.
    b.add_record(0xAAAA, 0).op = 60;
    b.write(dir.file("minor.ncw"));

    RankFile f;
    REQUIRE(f.open(dir.file("minor.ncw")));
    CHECK(f.header().minor == 7);
    const auto comms = f.comms();
    REQUIRE(comms.size() == 2);
    CHECK(comms[1].comm_id == 0xBBBB);
    CHECK(comms[1].nranks == 4);
    CHECK(comms[1].recent.size() == 3);
    const RecordSet rs = f.records();
    CHECK(rs.write_ticket == 301);
    CHECK(rs.dropped == 301 - 256);
    CHECK(rs.unknown_op == 1);
    REQUIRE(rs.records.size() == 255);
    CHECK(rs.records.front().ticket == 45);
    CHECK(rs.records.back().ticket == 299);
    for (const auto& r : rs.records) CHECK(r.count == 100 + r.ticket);
}

TEST_CASE("bad magic, empty and tiny files are errors", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard();
    b.hdr().magic[0] = 'X';
    b.write(dir.file("magic.ncw"));
    RankFile f;
    CHECK_FALSE(f.open(dir.file("magic.ncw")));
    CHECK(f.error().find("bad magic") != std::string::npos);

    std::ofstream(dir.file("empty.ncw")).close();
    CHECK_FALSE(f.open(dir.file("empty.ncw")));
    CHECK(f.error().find("empty") != std::string::npos);

    CHECK_FALSE(f.open(dir.file("absent.ncw")));
    CHECK(f.error().find("cannot open") != std::string::npos);

    fs::create_directory(dir.file("adir.ncw"));
    CHECK_FALSE(f.open(dir.file("adir.ncw")));

    // A FIFO must not block the reader.
    REQUIRE(mkfifo(dir.file("fifo.ncw").c_str(), 0600) == 0);
    CHECK_FALSE(f.open(dir.file("fifo.ncw")));
    CHECK(f.error() == "not a regular file");
}

TEST_CASE("insane header sizes are rejected", "[rank_file]") {
    TempDir dir;
    const auto path = dir.file("bad.ncw");
    RankFile f;
    auto try_with = [&](auto&& mutate) {
        FileBuilder b;
        b.standard();
        mutate(b.hdr());
        b.write(path);
        const bool ok = f.open(path);
        if (!ok) CHECK(f.error().find("corrupt header") != std::string::npos);
        return ok;
    };
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.ring_capacity = 300; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.ring_capacity = 1u << 30; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.max_comms = 5000; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.record_size = 64; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.record_size = 130; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.comm_slot_size = 100; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.bt_depth = 33; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.comm_table_offset = 16; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.ring_offset = h.comm_table_offset; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.file_size = h.ring_offset; }));
    CHECK_FALSE(try_with([](disk::FileHeader& h) { h.ring_offset = ~0ull - 7; }));
    CHECK(try_with([](disk::FileHeader& h) { h.max_comms = 2; }));  // fewer slots: still a valid layout
}

TEST_CASE("truncated files: header cut is an error, a cut table or ring reads partially", "[rank_file]") {
    TempDir dir;
    FileBuilder b(256, 4, 4);
    b.standard(40);
    const auto path = dir.file("cut.ncw");
    RankFile f;

    SECTION("header cut") {
        for (size_t len : {size_t(1), size_t(11), size_t(12), size_t(100), sizeof(disk::FileHeader) - 1}) {
            b.write(path, len);
            CHECK_FALSE(f.open(path));
            if (len >= 12)
                CHECK(f.error().find("truncated: " + std::to_string(len) + " bytes of") != std::string::npos);
        }
    }
    SECTION("header complete, comm table cut") {
        const size_t len = b.comm_off + b.slot_size + b.slot_size / 2;  // slot 0 whole, slot 1 cut
        b.write(path, len);
        REQUIRE(f.open(path));
        CHECK(f.truncated());
        CHECK(has_warning(f, "truncated: " + std::to_string(len) + " bytes of " + std::to_string(b.file_size)));
        CHECK(f.header().pid == 4242);
        const auto comms = f.comms();
        REQUIRE(comms.size() == 1);
        CHECK(comms[0].comm_id == 0xAAAA);
        const RecordSet rs = f.records();
        CHECK(rs.records.empty());
        CHECK(rs.cut == 40);
    }
    SECTION("ring cut") {
        const size_t len = b.ring_off + 10 * b.rec_size + 50;  // records 0..9 whole
        b.write(path, len);
        REQUIRE(f.open(path));
        CHECK(has_warning(f, "truncated: "));
        CHECK(f.comms().size() == 2);
        const RecordSet rs = f.records();
        REQUIRE(rs.records.size() == 10);
        CHECK(rs.records.back().ticket == 9);
        CHECK(rs.cut == 30);
        CHECK(f.backtrace(3).empty());  // backtrace region lost
    }
    SECTION("every length: never a crash") {
        for (size_t len = 0; len <= b.file_size; len += 97) {
            b.write(path, len);
            if (f.open(path)) read_everything(f);
        }
    }
}

TEST_CASE("random corruption never crashes the reader", "[rank_file]") {
    TempDir dir;
    FileBuilder clean(256, 4, 4);
    clean.standard(300);
    const auto path = dir.file("noise.ncw");
    std::mt19937_64 rng(12345);
    size_t opened = 0;
    for (int iter = 0; iter < 200; ++iter) {
        FileBuilder b = clean;
        unsigned char* p = b.bytes();
        // Half the runs aim at the header, where a wrong byte changes the layout; the rest hit anywhere.
        const size_t span = iter % 2 ? b.file_size : sizeof(disk::FileHeader);
        const int flips = 1 + int(rng() % 64);
        for (int i = 0; i < flips; ++i) p[rng() % span] = uint8_t(rng());
        if (iter % 5 == 0) std::memcpy(p, disk::kMagic, 8), p[8] = 1, p[9] = 0;  // keep it looking valid
        b.write(path, iter % 7 == 0 ? size_t(rng() % b.file_size) : SIZE_MAX);
        RankFile f;
        if (f.open(path)) {
            ++opened;
            read_everything(f);
            for (uint64_t t = 0; t < 300; t += 13) (void)f.backtrace(t);
            std::vector<FileSnapshot> snaps{snapshot(f)};
            AnalysisOptions opt;
            (void)analyze(snaps, opt);
        }
    }
    CHECK(opened > 0);
}

TEST_CASE("torn records, stale stamps and misplaced signatures are skipped", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard(10);
    b.rec(4).stamp = 2 * 4 + 1;                               // being written
    b.rec(6).stamp = 0;                                       // ticket handed out, never written
    b.slot(0).recent[3].seq = 3 + disk::kRecentSigs * 5 + 1;  // not at its seq % kRecentSigs place
    b.write(dir.file("torn.ncw"));
    RankFile f;
    REQUIRE(f.open(dir.file("torn.ncw")));
    const RecordSet rs = f.records();
    CHECK(rs.torn == 1);
    CHECK(rs.unwritten == 1);
    REQUIRE(rs.records.size() == 8);
    for (const auto& r : rs.records) CHECK((r.ticket != 4 && r.ticket != 6));
    CHECK(f.comms()[0].recent.size() == 4);
}

TEST_CASE("a wrapped ring returns the last capacity records and counts the dropped", "[rank_file]") {
    TempDir dir;
    FileBuilder b(256, 2);
    for (uint64_t i = 0; i < 256 * 3 + 100; ++i) b.add_record(0xAAAA, i + 1);
    b.write(dir.file("wrap.ncw"));
    RankFile f;
    REQUIRE(f.open(dir.file("wrap.ncw")));
    const RecordSet rs = f.records();
    CHECK(rs.write_ticket == 868);
    CHECK(rs.first_ticket == 612);
    CHECK(rs.dropped == 612);
    REQUIRE(rs.records.size() == 256);
    for (size_t i = 0; i < rs.records.size(); ++i) {
        CHECK(rs.records[i].ticket == 612 + i);
        CHECK(rs.records[i].seq == 613 + i);
    }
    CHECK(f.records(800).records.size() == 68);
}

TEST_CASE("unknown op types are skipped and counted", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard(6);
    b.rec(2).op = 11;   // between the p2p and lifecycle ranges
    b.rec(3).op = 250;  // a future kind
    b.rec(5).op = 0;    // None is never a valid record
    b.write(dir.file("unknown.ncw"));
    RankFile f;
    REQUIRE(f.open(dir.file("unknown.ncw")));
    const RecordSet rs = f.records();
    CHECK(rs.unknown_op == 3);
    CHECK(rs.records.size() == 3);
    CHECK(known_op(uint8_t(OpType::Recv)));
    CHECK(known_op(uint8_t(OpType::CommInit)));
    CHECK(known_op(uint8_t(OpType::AsyncError)));
    CHECK(known_op(uint8_t(OpType::WaitSignal)));  // 1.14: NCCL 2.29's calls
    CHECK_FALSE(known_op(uint8_t(OpType::WaitSignal) + 1));
}

TEST_CASE("backtraces are read from the record's slot", "[rank_file]") {
    TempDir dir;
    FileBuilder b(256, 2, 4);
    for (uint64_t i = 0; i < 260; ++i) {
        auto& r = b.add_record(0xAAAA, i + 1);
        r.flags = disk::kFlagHasBacktrace;
        uint64_t* fr = b.frames(i);
        fr[0] = 0x400000 + i;
        fr[1] = 0x500000 + i;
        fr[2] = 0;
        fr[3] = 0;
    }
    b.write(dir.file("bt.ncw"));
    RankFile f;
    REQUIRE(f.open(dir.file("bt.ncw")));
    CHECK(f.backtrace(259) == std::vector<uint64_t>{0x400000 + 259, 0x500000 + 259});
    CHECK(f.backtrace(10) == std::vector<uint64_t>{0x400000 + 10, 0x500000 + 10});
    CHECK(f.backtrace(2).empty());     // slot reused by ticket 258
    CHECK(f.backtrace(5000).empty());  // never written
}

TEST_CASE("communicators without a comm slot: rebuilt from the ring, and those it no longer holds are counted",
          "[rank_file]") {
    TempDir dir;
    FileBuilder b(256, 2);
    b.add_comm(0xAAAA, 0, 2);
    b.add_comm(0xBBBB, 0, 2);  // the table is full
    // Three communicators got no slot (FileHeader::comms_unslotted); the ring still holds the records of one.
    b.hdr().comms_unslotted = 3;
    for (uint64_t s = 1; s <= 4; ++s) {
        disk::OpRecord& r = b.add_record(0xCCCC, s);
        r.comm_slot = 0xffff;
        r.comm_nranks = 2;
        r.comm_rank = 0;
    }
    b.write(dir.file("unslotted.ncw"));
    RankFile f;
    REQUIRE(f.open(dir.file("unslotted.ncw")));
    CHECK(f.header().comms_unslotted == 3);
    const FileSnapshot s = snapshot(f, true);
    REQUIRE(s.comms.size() == 3);
    CHECK(s.comms[2].comm_id == 0xCCCC);
    CHECK(s.comms[2].slot == kNoCommSlot);
    CHECK(s.comms[2].coll_completed == 4);
    bool named = false, counted = false;
    for (const auto& w : s.warnings) {
        named = named || w.find("communicator 0x000000000000cccc had no comm slot") != std::string::npos;
        counted = counted || w.find(
                                 "3 communicators had no comm slot (more than 2 alive at once); 2 of them left "
                                 "no record in the ring") != std::string::npos;
    }
    CHECK(named);
    CHECK(counted);
}

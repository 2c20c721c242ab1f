// The rank-file reader: round trip, versioning, damage (truncation, corruption, torn records), ring wrap-around, and a
// writer racing the reader.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "rank_file_writer.h"
#include "read/rank_file.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace ncw;
using disk::OpType;

// Lays out a rank file in memory, the way the shim does, with adjustable strides (a newer minor writes bigger
// structures) and a small ring.
struct FileBuilder {
    uint32_t ring_capacity, max_comms, bt_depth, slot_size, rec_size;
    uint64_t comm_off = 0, ring_off = 0, bt_off = 0, file_size = 0;
    std::vector<uint64_t> words;  // uint64_t storage keeps every structure 8-byte aligned

    explicit FileBuilder(uint32_t cap = 256, uint32_t comms = 4, uint32_t depth = 0,
                         uint32_t slot = sizeof(disk::CommSlot), uint32_t rec = sizeof(disk::OpRecord))
        : ring_capacity(cap), max_comms(comms), bt_depth(depth), slot_size(slot), rec_size(rec) {
        comm_off = disk::kHeaderBytes;
        ring_off = disk::align_up(comm_off + uint64_t(max_comms) * slot_size, 4096);
        bt_off = disk::align_up(ring_off + uint64_t(ring_capacity) * rec_size, 4096);
        file_size = disk::align_up(bt_off + uint64_t(ring_capacity) * bt_depth * 8, 4096);
        words.assign(file_size / 8, 0);
        // Bytes a newer minor appended: a reader must step over them, never interpret them.
        if (slot_size > sizeof(disk::CommSlot) || rec_size > sizeof(disk::OpRecord))
            std::memset(bytes() + comm_off, 0xAB, bt_off - comm_off);
        auto* h = new (bytes()) disk::FileHeader{};
        for (uint32_t i = 0; i < max_comms; ++i) new (bytes() + comm_off + uint64_t(i) * slot_size) disk::CommSlot{};
        for (uint32_t i = 0; i < ring_capacity; ++i) new (bytes() + ring_off + uint64_t(i) * rec_size) disk::OpRecord{};
        // The strides are this builder's own (a newer minor writes bigger structures) and there is no environment
        // region until add_env_region: a Layout of its own, not compute_layout's.
        disk::Layout l;
        l.ring_capacity = ring_capacity;
        l.max_comms = max_comms;
        l.bt_depth = bt_depth;
        l.comm_slot_size = slot_size;
        l.record_size = rec_size;
        l.comm_table_offset = comm_off;
        l.ring_offset = ring_off;
        l.bt_offset = bt_off;
        l.file_size = file_size;
        disk::init_header(*h, l);
        disk::seal_header(*h);
        h->pid = 4242;
        h->global_rank = 3;
        h->local_rank = 1;
        h->world_size = 8;
        h->local_world_size = 4;
        std::strcpy(h->host, "node-a");
        std::strcpy(h->job_id, "job-17");
        h->start_mono_ns = 1000'000000000ull;
        h->start_real_ns = 1700000000'000000000ull;
        h->boot_id_hash = 0x1234;
        h->nccl_version = 22809;
        h->cuda_driver_version = 12080;
        h->heartbeat_mono_ns = 1100'000000000ull;
        h->process_state = uint32_t(disk::ProcessState::Running);
    }

    unsigned char* bytes() { return reinterpret_cast<unsigned char*>(words.data()); }
    disk::FileHeader& hdr() { return *reinterpret_cast<disk::FileHeader*>(bytes()); }
    disk::CommSlot& slot(uint32_t i) {
        return *reinterpret_cast<disk::CommSlot*>(bytes() + comm_off + uint64_t(i) * slot_size);
    }
    disk::OpRecord& rec(uint64_t ticket) {
        return *reinterpret_cast<disk::OpRecord*>(bytes() + ring_off + (ticket % ring_capacity) * rec_size);
    }
    uint64_t* frames(uint64_t ticket) {
        return reinterpret_cast<uint64_t*>(bytes() + bt_off + (ticket % ring_capacity) * bt_depth * 8);
    }

    disk::CommSlot& add_comm(uint64_t comm_id, int rank, int nranks) {
        const uint32_t i = hdr().num_comms.load();
        disk::CommSlot& s = slot(i);
        s.state = uint32_t(disk::CommState::Active);
        s.rank = rank;
        s.nranks = nranks;
        s.cuda_dev = rank;
        s.blocking = 1;
        s.comm_id = comm_id;
        std::snprintf(s.pci_bus_id, sizeof s.pci_bus_id, "0000:%02x:00.0", rank + 0x10);
        std::snprintf(s.name, sizeof s.name, "comm-%llx", (unsigned long long)comm_id);
        s.gpu_tracking = 1;
        hdr().num_comms = i + 1;
        return s;
    }

    static void add_sig(disk::CommSlot& s, uint64_t seq, OpType op = OpType::AllReduce, uint64_t count = 1024) {
        auto& e = s.recent[seq % disk::kRecentSigs];
        e.count = count;
        e.t_issue_ns = 1000'000000000ull + seq * 1000;
        e.op = uint8_t(op);
        e.dtype = 7;
        e.redop = 0;
        e.root = -1;
        e.tid = 77;
        e.stream = 0x5000;
        e.seq = seq;
    }

    disk::OpRecord& add_record(uint64_t comm_id, uint64_t seq, OpType op = OpType::AllReduce) {
        const uint64_t t = hdr().write_ticket.load();
        disk::OpRecord& r = rec(t);
        r.comm_id = comm_id;
        r.seq = seq;
        r.op_index = seq;
        r.count = 100 + t;
        r.sendbuf = 0x7000 + t;
        r.recvbuf = 0x8000 + t;
        r.stream = 0x5000;
        r.t_issue_ns = 1000'000000000ull + t * 1000;
        r.t_return_ns = r.t_issue_ns + 10;
        r.t_reached_ns = r.t_issue_ns + 20;
        r.t_done_ns = r.t_issue_ns + 30;
        r.tid = 77;
        r.group_id = 0;
        r.op = uint8_t(op);
        r.dtype = 7;
        r.flags = 0;
        r.peer_or_root = -1;
        r.redop = 0;
        r.result = 0;
        r.comm_slot = 0;
        r.stamp = 2 * t + 2;
        hdr().write_ticket = t + 1;
        return r;
    }

    // A header, two comms with signatures #1..#5 and #1..#3, and n records.
    void standard(uint64_t n_records = 10) {
        auto& a = add_comm(0xAAAA, 0, 2);
        for (uint64_t s = 1; s <= 5; ++s) add_sig(a, s);
        a.coll_issued = 5;
        a.coll_returned = 5;
        a.coll_reached = 5;
        a.coll_completed = 4;
        a.ops_issued = 5;
        a.ops_completed = 4;
        a.t_last_issue_ns = 1090'000000000ull;
        a.t_last_progress_ns = 1089'000000000ull;
        auto& b = add_comm(0xBBBB, 1, 4);
        b.parent_id = 0xAAAA;
        for (uint64_t s = 1; s <= 3; ++s) add_sig(b, s, OpType::Broadcast, 8);
        b.coll_issued = 3;
        b.coll_completed = 3;
        for (uint64_t i = 0; i < n_records; ++i) add_record(i % 2 ? 0xBBBB : 0xAAAA, i / 2 + 1);
    }

    // Appends a format 1.1 environment region of `capacity` bytes holding `entries`, of which `published` bytes are
    // announced (SIZE_MAX: all of them).
    uint64_t add_env_region(const std::vector<std::string>& entries, size_t published = SIZE_MAX,
                            uint32_t capacity = disk::kEnvCapacity) {
        const uint64_t env_off = file_size;
        file_size = disk::align_up(env_off + capacity, 4096);
        words.resize(file_size / 8, 0);
        uint64_t used = 0;
        for (const auto& e : entries) {
            std::memcpy(bytes() + env_off + used, e.c_str(), e.size() + 1);
            used += e.size() + 1;
        }
        hdr().minor = 1;
        hdr().env_offset = env_off;
        hdr().env_capacity = capacity;
        hdr().env_bytes = published == SIZE_MAX ? used : published;
        hdr().file_size = file_size;
        return env_off;
    }

    void write(const std::string& path, size_t len = SIZE_MAX) const {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(words.data()), std::streamsize(std::min<size_t>(len, file_size)));
    }
};

bool has_warning(const RankFile& f, const std::string& needle) {
    for (const auto& w : f.warnings())
        if (w.find(needle) != std::string::npos) return true;
    return false;
}

// Reads everything a caller could ask for; the point is that none of it crashes.
size_t read_everything(RankFile& f) {
    size_t n = 0;
    const HeaderInfo h = f.header();
    const auto comms = f.comms();
    const RecordSet rs = f.records();
    for (const auto& r : rs.records) n += f.backtrace(r.ticket).size();
    n += comms.size() + rs.records.size() + h.host.size();
    for (const auto& c : comms) (void)to_rank_comm_state(h, c, f.path(), live_context(h.heartbeat_mono_ns));
    return n;
}

}  // namespace

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
    CHECK(rs.torn == 2);
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
    CHECK_FALSE(known_op(40));
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

TEST_CASE("liveness: exit state, heartbeat age, kill(pid, 0)", "[rank_file]") {
    FileBuilder b;
    b.standard();
    HeaderInfo h;
    h.pid = getpid();
    h.host = this_hostname();
    h.boot_id_hash = this_boot_id_hash();
    h.heartbeat_mono_ns = 50'000000000ull;
    h.process_state = uint32_t(disk::ProcessState::Running);
    CommInfo c;
    c.rank = 0;
    c.nranks = 2;

    auto ctx = live_context(h.heartbeat_mono_ns + 1'000000000ull);
    CHECK(ctx.host == this_hostname());
    auto s = to_rank_comm_state(h, c, "x", ctx);
    CHECK(s.alive);
    CHECK_FALSE(s.exited_clean);
    CHECK(s.heartbeat_age_s == Approx(1.0));

    // Stale heartbeat on this boot: gone.
    ctx.now_mono_ns = h.heartbeat_mono_ns + 6'000000000ull;
    s = to_rank_comm_state(h, c, "x", ctx);
    CHECK_FALSE(s.alive);
    CHECK(s.heartbeat_age_s == Approx(6.0));

    // Another boot: monotonic clocks do not compare, so no age check (live).
    HeaderInfo other = h;
    other.boot_id_hash = h.boot_id_hash ^ 1;
    s = to_rank_comm_state(other, c, "x", ctx);
    CHECK(s.alive);
    CHECK(s.heartbeat_age_s == 0);

    // Exited cleanly.
    HeaderInfo exited = h;
    exited.process_state = uint32_t(disk::ProcessState::ExitedClean);
    ctx.now_mono_ns = h.heartbeat_mono_ns;
    s = to_rank_comm_state(exited, c, "x", ctx);
    CHECK_FALSE(s.alive);
    CHECK(s.exited_clean);

    // A process of this host and boot that no longer exists.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    REQUIRE(child > 0);
    REQUIRE(waitpid(child, nullptr, 0) == child);
    HeaderInfo gone = h;
    gone.pid = child;
    s = to_rank_comm_state(gone, c, "x", ctx);
    CHECK_FALSE(s.alive);
    // Same pid on another host: not probed.
    gone.host = "elsewhere";
    s = to_rank_comm_state(gone, c, "x", ctx);
    CHECK(s.alive);
    // pid 0 / negative never reach kill().
    HeaderInfo zero = h;
    zero.pid = 0;
    CHECK(to_rank_comm_state(zero, c, "x", ctx).alive);
    zero.pid = -1;
    CHECK(to_rank_comm_state(zero, c, "x", ctx).alive);
}

TEST_CASE("request_dump increments dump_request", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard();
    b.write(dir.file("d.ncw"));
    std::string err;
    REQUIRE(request_dump(dir.file("d.ncw"), &err));
    REQUIRE(request_dump(dir.file("d.ncw"), &err));
    RankFile f;
    REQUIRE(f.open(dir.file("d.ncw")));
    CHECK(f.header().dump_request == 2);
    CHECK_FALSE(request_dump(dir.file("none.ncw"), &err));
    CHECK_FALSE(err.empty());
}

TEST_CASE("list_rank_files finds *.ncw files, optionally recursively", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.write(dir.file("b.ncw"));
    b.write(dir.file("a.ncw"));
    b.write(dir.file("notes.txt"));
    fs::create_directories(dir.path / "sub" / "deeper");
    b.write((dir.path / "sub" / "c.ncw").string());
    b.write((dir.path / "sub" / "deeper" / "d.ncw").string());

    const auto flat = list_rank_files(dir.path.string());
    REQUIRE(flat.size() == 2);
    CHECK(fs::path(flat[0]).filename() == "a.ncw");
    CHECK(fs::path(flat[1]).filename() == "b.ncw");
    CHECK(list_rank_files(dir.path.string(), true).size() == 4);

    std::vector<std::string> errors;
    CHECK(list_rank_files(dir.file("missing"), false, &errors).empty());
    CHECK(errors.size() == 1);
}

TEST_CASE("a writer racing the reader never yields an inconsistent record", "[rank_file][concurrency]") {
    TempDir dir;
    FileBuilder b(256, 1);
    b.add_comm(0xC0FFEE, 0, 1);
    const auto path = dir.file("race.ncw");
    b.write(path);

    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    void* map = mmap(nullptr, b.file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(map != MAP_FAILED);
    auto* base = static_cast<unsigned char*>(map);
    auto* hdr = reinterpret_cast<disk::FileHeader*>(base);
    auto* slot = reinterpret_cast<disk::CommSlot*>(base + b.comm_off);
    auto rec = [&](uint64_t t) {
        return reinterpret_cast<disk::OpRecord*>(base + b.ring_off + (t % 256) * b.rec_size);
    };
    // Release stores keep the odd stamp (or the zeroed seq) visible before any new data.
    auto st = [](auto& field, auto v) { __atomic_store_n(&field, v, __ATOMIC_RELEASE); };

    // The shim's protocols: a record takes its ticket first, is stamped odd, filled, then stamped even; a signature
    // is zeroed, filled, then given its seq.
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        uint64_t seq = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            const uint64_t t = hdr->write_ticket.fetch_add(1, std::memory_order_acq_rel);
            disk::OpRecord* r = rec(t);
            r->stamp.store(2 * t + 1, std::memory_order_relaxed);
            st(r->comm_id, t * 3 + 1);
            st(r->seq, t);
            st(r->op_index, t ^ 0x5555);
            st(r->count, t * 7);
            st(r->sendbuf, ~t);
            st(r->recvbuf, t << 1);
            st(r->stream, t + 11);
            st(r->t_issue_ns, t * 13);
            st(r->tid, uint32_t(t));
            st(r->group_id, uint32_t(t >> 3));
            st(r->op, uint8_t(OpType::AllReduce));
            st(r->dtype, uint8_t(t % 12));
            st(r->peer_or_root, int32_t(t & 0xffff));
            st(r->redop, int32_t(t % 5));
            r->stamp.store(2 * t + 2, std::memory_order_release);

            ++seq;
            auto& e = slot->recent[seq % disk::kRecentSigs];
            e.seq.store(0, std::memory_order_relaxed);
            st(e.count, seq * 5);
            st(e.t_issue_ns, seq * 9);
            st(e.tid, uint32_t(seq));
            st(e.stream, seq + 3);
            e.seq.store(seq, std::memory_order_release);
            slot->coll_issued.store(seq, std::memory_order_release);
        }
    });

    RankFile f;
    REQUIRE(f.open(path));
    uint64_t seen = 0, torn = 0, sigs = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    int snaps = 0;
    while (std::chrono::steady_clock::now() < until || snaps < 50) {
        ++snaps;
        const RecordSet rs = f.records();
        torn += rs.torn;
        uint64_t prev = 0;
        bool first = true;
        for (const auto& r : rs.records) {
            const uint64_t t = r.ticket;
            const bool ok = r.comm_id == t * 3 + 1 && r.seq == t && r.op_index == (t ^ 0x5555) && r.count == t * 7 &&
                            r.sendbuf == ~t && r.recvbuf == (t << 1) && r.stream == t + 11 && r.t_issue_ns == t * 13 &&
                            r.tid == uint32_t(t) && r.group_id == uint32_t(t >> 3) && r.dtype == t % 12 &&
                            r.peer_or_root == int32_t(t & 0xffff) && r.redop == int32_t(t % 5);
            if (!ok) FAIL("inconsistent record at ticket " << t);
            if (!first && t <= prev) FAIL("records out of order");
            prev = t;
            first = false;
            ++seen;
        }
        for (const auto& c : f.comms())
            for (const auto& s : c.recent) {
                if (s.count != s.seq * 5 || s.t_issue_ns != s.seq * 9 || s.tid != uint32_t(s.seq) ||
                    s.stream != s.seq + 3)
                    FAIL("inconsistent signature at seq " << s.seq);
                ++sigs;
            }
    }
    stop = true;
    writer.join();
    munmap(map, b.file_size);
    INFO("snapshots " << snaps << ", records " << seen << ", torn " << torn << ", signatures " << sigs);
    CHECK(seen > 0);
    CHECK(sigs > 0);
}

TEST_CASE("format 1.1: the environment region reads back; a 1.0 file has none", "[rank_file][env]") {
    TempDir dir;
    FileBuilder b;
    b.standard(4);
    const std::vector<std::string> entries = {"NCCL_DEBUG=INFO", "RANK=3", "ncclwatch.no_effect=NCCL_SOCKET_TIMEOUT",
                                              "EMPTY="};
    b.add_env_region(entries);
    const auto path = dir.file("r.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.warnings().empty());
    CHECK(f.header().env == entries);
    CHECK(f.header().minor == 1);
    CHECK(f.records().records.size() == 4);  // the region does not disturb the rest

    // The same bytes labelled 1.0: a 1.0 writer never wrote these fields, so the reader does not look at them.
    b.hdr().minor = 0;
    b.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env.empty());
    CHECK(f.warnings().empty());

    // A 1.1 header with the fields left zero (no region) is no region, not damage.
    FileBuilder plain;
    plain.hdr().minor = 1;
    plain.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env.empty());
    CHECK(f.warnings().empty());
}

TEST_CASE("a damaged environment region is ignored with a warning, the rest reads", "[rank_file][env]") {
    TempDir dir;
    const auto path = dir.file("r.ncw");
    auto try_with = [&](auto&& damage) {
        FileBuilder b;
        b.standard(4);
        b.add_env_region({"A=1"});
        damage(b);
        b.write(path);
        RankFile f;
        REQUIRE(f.open(path));
        CHECK(has_warning(f, "environment region ignored"));
        CHECK(f.header().env.empty());
        CHECK(f.records().records.size() == 4);
    };
    try_with([](FileBuilder& b) { b.hdr().env_offset = b.ring_off; });         // overlaps the ring
    try_with([](FileBuilder& b) { b.hdr().env_capacity = 0xFFFFFFFFu; });      // absurd size
    try_with([](FileBuilder& b) { b.hdr().env_offset = b.file_size; });        // past the declared end
    try_with([](FileBuilder& b) { b.hdr().env_offset = uint64_t(1) << 62; });  // overflow bait
}

TEST_CASE("only published environment bytes are read; a cut entry is dropped", "[rank_file][env]") {
    TempDir dir;
    const auto path = dir.file("r.ncw");
    FileBuilder b;
    b.add_env_region({"A=1", "B=22", "C=333"}, 4 + 5 + 2);  // "A=1\0B=22\0C=": C is half-published
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22"});

    // A count beyond the capacity is clamped to it; a truncated file reads what it holds and says so.
    b.hdr().env_bytes = uint64_t(1) << 40;
    b.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22", "C=333"});
    b.write(path, b.file_size - 100);
    REQUIRE(f.open(path));
    CHECK(has_warning(f, "environment region cut"));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22", "C=333"});
}

TEST_CASE("the writer's environment region round-trips through the reader", "[rank_file][env]") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 5;
    id.host = "node-z";
    id.pid = getpid();
    id.job_id = "envjob";
    RankFileWriter w = create_rank_file(dir.path.string(), id, disk::kMinRingCapacity, 0);
    REQUIRE(w.file_backed);
    REQUIRE(w.env_capacity == disk::kEnvCapacity);
    CHECK(w.hdr->minor == disk::kFormatMinor);

    // Whole entries only, keeping room for later appends; an entry with a NUL or an empty one is refused.
    const std::string big(disk::kEnvCapacity - 100, 'x');
    CHECK(append_env_entries(w, {"RANK=5", "NCCL_DEBUG=WARN", big, std::string("BAD=a\0b", 7), ""}, 1000) == 3);
    CHECK(append_env_entries(w, {"ncclwatch.probe=done"}) == 0);

    RankFile f;
    REQUIRE(f.open(w.path));
    CHECK(f.warnings().empty());
    CHECK(f.header().env == std::vector<std::string>{"RANK=5", "NCCL_DEBUG=WARN", "ncclwatch.probe=done"});
    CHECK(f.header().file_size == w.size);
    munmap(w.base, w.size);
}

// The reader over files that change under it: another process may truncate, regrow or replace a sibling's rank file
// at any moment. Reads are copies (pread), so they fail with a named error instead of faulting (SIGBUS) the reader.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ncclwatch/format.h"
#include "read/rank_file.h"
#include "read/snapshot.h"
#include "read/text.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace ncw;

namespace {

// A valid file straight from the format: two comms with signatures, a full lap of records with backtraces.
struct SmallFile {
    disk::Layout l = disk::compute_layout(256, 2, 2);
    std::vector<uint64_t> words = std::vector<uint64_t>(l.file_size / 8, 0);

    SmallFile() {
        auto* h = new (bytes()) disk::FileHeader{};
        disk::init_header(*h, l);
        disk::seal_header(*h);
        h->pid = 77;
        std::strcpy(h->host, "node-s");
        std::strcpy(h->job_id, "job-s");
        for (uint32_t i = 0; i < 2; ++i) {
            auto* s = new (bytes() + l.comm_table_offset + i * l.comm_slot_size) disk::CommSlot{};
            s->state = uint32_t(disk::CommState::Active);
            s->rank = 0;
            s->nranks = 2;
            s->comm_id = 0xc0 + i;
            for (uint64_t seq = 1; seq <= 10; ++seq) {
                auto& g = s->recent[seq % disk::kRecentSigs];
                g.count = 64;
                g.op = uint8_t(disk::OpType::AllReduce);
                g.seq = seq;
            }
        }
        h->num_comms = 2;
        for (uint64_t t = 0; t < 200; ++t) {
            auto* r = new (bytes() + l.ring_offset + t * l.record_size) disk::OpRecord{};
            r->comm_id = 0xc0;
            r->seq = t + 1;
            r->op = uint8_t(disk::OpType::AllReduce);
            r->stamp = 2 * t + 2;
            auto* f = reinterpret_cast<uint64_t*>(bytes() + l.bt_offset + t * l.bt_depth * 8);
            f[0] = 0x400000 + t;
        }
        h->write_ticket = 200;
    }
    unsigned char* bytes() { return reinterpret_cast<unsigned char*>(words.data()); }
    void write(const std::string& path) {
        std::ofstream(path, std::ios::binary | std::ios::trunc)
            .write(reinterpret_cast<const char*>(words.data()), std::streamsize(l.file_size));
    }
};

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("a file that shrinks between the header read and the ring read: named, empty, no fault", "[shrink]") {
    TempDir dir;
    SmallFile b;
    const std::string path = dir.file("s.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.header().pid == 77);
    REQUIRE(f.comms().size() == 2);
    REQUIRE(f.records().records.size() == 200);
    CHECK(f.read_error().empty());

    // Cut inside the ring: reading it now faults a mapping; a copy comes back short.
    fs::resize_file(path, b.l.ring_offset + 10 * sizeof(disk::OpRecord));
    const RecordSet rs = f.records();
    CHECK(rs.records.empty());
    CHECK(contains(f.read_error(), "shrank while being read"));
    CHECK(f.backtrace(5).empty());
    CHECK(f.comms().empty());  // sticky: reopen to read what is there now

    const FileSnapshot s = snapshot(f, true);
    CHECK_FALSE(s.ok);
    CHECK(s.path == path);
    CHECK(contains(s.error, "shrank while being read"));

    // Reopened, the file reads as a truncated one: header and comms, the ring's first records.
    REQUIRE(f.open(path));
    CHECK(f.truncated());
    CHECK(f.comms().size() == 2);
    CHECK(f.records().records.size() == 10);
    CHECK(f.read_error().empty());
}

TEST_CASE("a file cut to its header page after the comm table was read", "[shrink]") {
    TempDir dir;
    SmallFile b;
    const std::string path = dir.file("h.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    REQUIRE(f.comms().size() == 2);
    fs::resize_file(path, 4096);
    CHECK(f.header().pid == 77);  // the header page is still there
    CHECK(f.comms().empty());
    CHECK(f.records().records.empty());
    CHECK_FALSE(f.read_error().empty());
}

TEST_CASE("a file that grows or is replaced after open is skipped by the snapshot, named", "[shrink]") {
    TempDir dir;
    SmallFile b;
    const std::string path = dir.file("g.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    REQUIRE(snapshot(f).ok);
    std::string want;
    SECTION("grown") {
        fs::resize_file(path, b.l.file_size + 4096);
        want = "changed size while being read";
    }
    SECTION("renamed over, same size") {
        // The descriptor still reads the old file, whole and unchanged: only its link count says it is gone.
        b.write(path + ".tmp");
        fs::rename(path + ".tmp", path);
        want = "replaced or deleted since it was opened";
    }
    const FileSnapshot s = snapshot(f);
    CHECK_FALSE(s.ok);
    CHECK(contains(s.error, want.c_str()));
    CHECK(s.comms.empty());
    REQUIRE(f.open(path));
    CHECK(snapshot(f).ok);
}

TEST_CASE("truncating and restoring a file while it is read never faults the reader", "[shrink][concurrency]") {
    TempDir dir;
    SmallFile b;
    const std::string path = dir.file("loop.ncw");
    b.write(path);
    std::atomic<bool> stop{false};
    std::thread cutter([&] {
        for (int i = 0; i < 300 && !stop; ++i) {
            fs::resize_file(path, i % 3 == 0 ? 4096 : b.l.ring_offset + 1000);
            std::this_thread::yield();
            b.write(path);
        }
        stop = true;
    });
    size_t reads = 0, failed = 0;
    RankFile kept;  // opened once, like the watchdog's cache
    while (!stop) {
        if (!kept.is_open() || !kept.read_error().empty()) kept.open(path);
        const FileSnapshot s = snapshot(kept, true);
        failed += !s.ok;
        const FileSnapshot fresh = snapshot_path(path, true);
        failed += !fresh.ok;
        reads += 2;
        std::string err;
        (void)request_dump(path, &err);
    }
    cutter.join();
    CHECK(reads > 0);
    INFO(failed << " of " << reads << " snapshots saw the file change");
}

TEST_CASE("request_dump on a file cut below its header fails cleanly", "[shrink]") {
    TempDir dir;
    SmallFile b;
    const std::string path = dir.file("d.ncw");
    b.write(path);
    REQUIRE(request_dump(path));
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.header().dump_request == 1);
    fs::resize_file(path, 100);
    std::string err;
    CHECK_FALSE(request_dump(path, &err));
    CHECK_FALSE(err.empty());
}

TEST_CASE("list_rank_files names the *.ncw entries it skips and never opens them", "[shrink]") {
    TempDir dir;
    SmallFile b;
    b.write(dir.file("good.ncw"));
    REQUIRE(mkfifo(dir.file("fifo.ncw").c_str(), 0600) == 0);
    fs::create_directories(dir.path / "folder.ncw");
    fs::create_symlink(dir.file("nowhere"), dir.file("dangling.ncw"));
    std::vector<std::string> errors;
    const auto found = list_rank_files(dir.path.string(), false, &errors);
    REQUIRE(found.size() == 1);
    CHECK(fs::path(found[0]).filename() == "good.ncw");
    auto said = [&](const char* name, const char* what) {
        for (const auto& e : errors)
            if (contains(e, name) && contains(e, what)) return true;
        return false;
    };
    CHECK(said("fifo.ncw", "skipped: a FIFO"));
    CHECK(said("folder.ncw", "skipped: a folder"));
    CHECK(said("dangling.ncw", "skipped: a dangling symbolic link"));
    errors.clear();
    CHECK(list_rank_files(dir.path.string(), true, &errors).size() == 1);
    CHECK(errors.size() == 3);
}

TEST_CASE("text::echo cuts and escapes a value for one log line", "[text]") {
    CHECK(text::echo("soon") == "soon");
    CHECK(text::echo("a\nb\t\\\x01") == "a\\nb\\t\\\\\\x01");
    const std::string big(100000, 'x');
    const std::string e = text::echo(big);
    CHECK(e.size() < 240);
    CHECK(contains(e, "... (100000 bytes)"));
}

// Snapshots of many files on a few threads (read/snapshot_batch.h): the paths' order whatever thread read what, a
// file named twice read once, a bad file named in its place, and the history budget of a big analysis.
#include <fstream>

#include "rank_file_fixtures.h"
#include "read/snapshot_batch.h"

using namespace rank_file_fixtures;
using namespace ncw;

namespace {

// A file of one communicator: the signature window holds #(last-63) .. #last, the ring every collective #1 .. #last.
void write_rank(const std::string& path, int rank, uint64_t last = 164) {
    FileBuilder b(256, 4);
    b.hdr().global_rank = rank;
    auto& c = b.add_comm(0xAAAA, rank, 64);
    for (uint64_t s = last - disk::kRecentSigs + 1; s <= last; ++s) FileBuilder::add_sig(c, s);
    c.coll_issued = c.coll_completed = last;
    for (uint64_t s = 1; s <= last; ++s) b.add_record(0xAAAA, s);
    b.write(path);
}

std::vector<uint64_t> seqs(const FileSnapshot& s) {
    std::vector<uint64_t> out;
    for (const auto& g : s.comms.at(0).recent) out.push_back(g.seq);
    return out;
}

}  // namespace

TEST_CASE("snapshot_paths: the paths' order, once each, bad files in place, any number of threads",
          "[rank_file][batch]") {
    TempDir dir;
    std::vector<std::string> paths;
    for (int r = 0; r < 40; ++r) {
        paths.push_back(dir.file("rank" + std::to_string(r) + ".ncw"));
        write_rank(paths.back(), r);
    }
    std::ofstream(dir.file("junk.ncw")) << "not a rank file, but long enough to have a magic";
    paths.insert(paths.begin() + 7, dir.file("junk.ncw"));
    paths.insert(paths.begin() + 20, dir.file("missing.ncw"));
    paths.push_back(dir.file("./rank3.ncw"));  // the same file again: read once, at its first place

    const auto one = snapshot_paths(paths, true, 1);
    REQUIRE(one.size() == 42);
    CHECK_FALSE(one[7].ok);
    CHECK(one[7].error.find("bad magic") != std::string::npos);
    CHECK_FALSE(one[20].ok);
    CHECK(one[20].error.find("cannot open") != std::string::npos);
    int rank = 0;
    for (size_t i = 0; i < one.size(); ++i) {
        CHECK(one[i].path == paths[i]);
        if (i == 7 || i == 20) continue;
        REQUIRE(one[i].ok);
        CHECK(one[i].header.global_rank == rank++);
        CHECK(seqs(one[i]).size() == 164);  // the window and the history before it
    }
    for (unsigned threads : {0u, 3u, 16u, 64u}) {
        const auto many = snapshot_paths(paths, true, threads);
        REQUIRE(many.size() == one.size());
        for (size_t i = 0; i < one.size(); ++i) {
            CHECK(many[i].path == one[i].path);
            CHECK(many[i].ok == one[i].ok);
            CHECK(many[i].error == one[i].error);
            if (one[i].ok) {
                CHECK(many[i].header.global_rank == one[i].header.global_rank);
                CHECK(seqs(many[i]) == seqs(one[i]));
            }
        }
    }
    CHECK(snapshot_paths({}, true).empty());
    CHECK(default_read_threads() >= 16);
    CHECK(default_read_threads() <= 32);
}

TEST_CASE("snapshot_paths: a big analysis shares its history budget", "[rank_file][batch]") {
    CHECK(history_records_for(0) == kHistoryRecords);
    CHECK(history_records_for(1) == kHistoryRecords);
    CHECK(history_records_for(1024) == kHistoryRecords);
    CHECK(history_records_for(1025) == kHistoryBudget / 1025);
    CHECK(history_records_for(4096) == 512);
    CHECK(history_records_for(16384) == 128);
    CHECK(history_records_for(1 << 20) == kMinHistoryRecords);

    // The history comes from the newest records only: 100 of them hold #65 .. #164, the window #101 .. #164.
    TempDir dir;
    const auto path = dir.file("r0.ncw");
    write_rank(path, 0);
    const FileSnapshot s = snapshot_path(path, true, 100);
    REQUIRE(s.ok);
    const auto got = seqs(s);
    REQUIRE(got.size() == 100);
    CHECK(got.front() == 65);
    CHECK(got.back() == 164);
    CHECK(seqs(snapshot_path(path, true)).front() == 1);
    CHECK(seqs(snapshot_path(path, false)).front() == 101);  // no ring read: the window alone
}

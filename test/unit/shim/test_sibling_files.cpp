// The watchdog's view of this host's other rank files (shim/watch/sibling_files.h): only this host's files of the job
// folder, each opened once; a cut file skipped; one that changes size under a read dropped, and read again once it
// is whole.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "shim/watch/sibling_files.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;
namespace fs = std::filesystem;

namespace {

// A rank file of `host`'s rank `rank` in the job folder, written by the shim's writer.
RankFileWriter rank_file(const TempDir& root, const std::string& host, int rank) {
    ProcessIdentity id = test_identity("siblings");
    id.host = host;
    id.global_rank = rank;
    id.pid = 1000 + rank;
    RankFileWriter w = create_rank_file(root.path.string(), id, 256, 0);
    REQUIRE(w.file_backed);
    return w;
}

std::vector<int> ranks(const std::vector<FileSnapshot>& snaps) {
    std::vector<int> out;
    for (const FileSnapshot& s : snaps) {
        CHECK(s.ok);
        out.push_back(s.header.global_rank);
    }
    return out;
}

}  // namespace

TEST_CASE("only this host's rank files of the job folder are read, each opened once") {
    TempDir root("ncw_siblings");
    const RankFileWriter a = rank_file(root, "node-a", 0);
    const RankFileWriter b = rank_file(root, "node-a", 1);
    const RankFileWriter other = rank_file(root, "node-b", 2);
    const RankFileWriter prefix = rank_file(root, "node-a2", 3);  // "node-a" is a prefix of its host, not its host
    const RankFileWriter odd = rank_file(root, "node a", 4);      // a host name the file name carries sanitised
    SiblingFiles siblings("node-a");
    CHECK(siblings.read("", false, false).empty());  // no file of our own (memory only): no siblings either
    const std::vector<FileSnapshot> snaps = siblings.read(a.job_dir, false, false);
    CHECK(ranks(snaps) == std::vector<int>{0, 1});
    REQUIRE(snaps.size() == 2);
    CHECK(snaps[0].path == a.path);
    CHECK_FALSE(snaps[0].p2p_read);
    const RankFile* fa = siblings.find(a.path);
    REQUIRE(fa != nullptr);
    CHECK(siblings.find(other.path) == nullptr);
    CHECK(siblings.find(prefix.path) == nullptr);
    // Read again: the same open file, now with the rings' p2p counts; a file that appeared since is found too.
    const RankFileWriter c = rank_file(root, "node-a", 5);
    const std::vector<FileSnapshot> again = siblings.read(a.job_dir, true, false);
    CHECK(ranks(again) == std::vector<int>{0, 1, 5});
    CHECK(again[0].p2p_read);
    CHECK(siblings.find(a.path) == fa);

    SiblingFiles odd_host("node a");
    CHECK(ranks(odd_host.read(a.job_dir, false, false)) == std::vector<int>{4});
}

TEST_CASE("a cut rank file is skipped; one that changes size under a read is dropped and read again once whole") {
    TempDir root("ncw_siblings");
    const RankFileWriter a = rank_file(root, "node-a", 0);
    const RankFileWriter b = rank_file(root, "node-a", 1);
    const RankFileWriter cut = rank_file(root, "node-a", 2);
    // A copy cut short before it was first seen (the writer never touches its mapping again here).
    REQUIRE(truncate(cut.path.c_str(), off_t(cut.size / 2)) == 0);
    SiblingFiles siblings("node-a");
    CHECK(ranks(siblings.read(a.job_dir, false, false)) == std::vector<int>{0, 1});
    CHECK(siblings.find(cut.path) == nullptr);

    // b shrinks after it was opened: dropped from this read and closed; while cut, skipped on reopening.
    REQUIRE(truncate(b.path.c_str(), off_t(b.size / 2)) == 0);
    CHECK(ranks(siblings.read(a.job_dir, false, false)) == std::vector<int>{0});
    CHECK(siblings.find(b.path) == nullptr);
    CHECK(ranks(siblings.read(a.job_dir, false, false)) == std::vector<int>{0});
    // Whole again (its size restored): read again.
    REQUIRE(truncate(b.path.c_str(), off_t(b.size)) == 0);
    CHECK(ranks(siblings.read(a.job_dir, false, false)) == std::vector<int>{0, 1});
    CHECK(siblings.find(b.path) != nullptr);
}

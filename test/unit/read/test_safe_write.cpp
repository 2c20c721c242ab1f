// Attack test (issue 15, item 7, the shim's side): the shim's .report.json / .dump.json and its rank file are written
// into NCCLWATCH_DIR/<job>/, a folder someone else may have made first. A symlink planted at the final name, at any
// temporary name an earlier build used or a guess of ours, or in place of the job folder itself, is never followed:
// the victim stays byte for byte as it was (read/safe_write.h; the live collector's side is in test_live_server).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "read/safe_write.h"
#include "shim/record/rank_file_writer.h"
#include "temp_dir.h"

using namespace ncw;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

mode_t mode_of(const fs::path& p) {
    struct stat sb {};
    REQUIRE(lstat(p.c_str(), &sb) == 0);
    return sb.st_mode & 07777;
}

mode_t umask_now() {
    const mode_t m = umask(0);
    umask(m);
    return m;
}

ProcessIdentity identity(const std::string& job) {
    ProcessIdentity id;
    id.global_rank = 0;
    id.local_rank = 0;
    id.world_size = 1;
    id.local_world_size = 1;
    id.host = "h";
    id.pid = getpid();
    id.job_id = job;
    return id;
}

const char* const kVictim = "victim: must stay as it is\n";

}  // namespace

TEST_CASE("the shim's report write follows no symlink planted at the final or any predictable temporary name") {
    TempDir dir("ncw_safe_write");
    const fs::path job = dir.path / "job";
    fs::create_directories(job);
    const fs::path victim = dir.path / "victim";
    { std::ofstream(victim) << kVictim; }
    const std::string name = "rank0-h-" + std::to_string(getpid()) + ".report.json";
    const std::string pid = std::to_string(getpid());
    // The names of every earlier build (<name>.tmp.<pid>, <name>.<pid>.<n>.tmp) and the obvious guesses.
    std::vector<std::string> planted = {name, name + ".tmp", name + ".tmp." + pid,
                                        name + ".tmp." + std::to_string(getpid() + 1)};
    for (int n = 0; n < 4; ++n) planted.push_back(name + "." + pid + "." + std::to_string(n) + ".tmp");
    for (const auto& p : planted) fs::create_symlink(victim, job / p);

    for (int round = 0; round < 3; ++round) {  // the report is rewritten at each event
        std::string why;
        const std::string text = "{\"round\": " + std::to_string(round) + "}\n";
        REQUIRE(write_file_atomic((job / name).string(), text, &why));
        CHECK(why.empty());
        CHECK(slurp(victim) == kVictim);
        CHECK(!fs::is_symlink(job / name));
        CHECK(fs::is_regular_file(job / name));
        CHECK(slurp(job / name) == text);
        CHECK(mode_of(job / name) == (0640 & ~umask_now()));
    }
    // The planted links other than the final name are left alone (removing them is no business of ours), and no
    // temporary file of ours is left behind.
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(job)) {
        ++entries;
        if (e.path().filename() != name) CHECK(fs::is_symlink(e.path()));
    }
    CHECK(entries == planted.size());
}

TEST_CASE("a symlink in place of the job folder is refused: nothing is written through it") {
    TempDir dir("ncw_safe_write");
    const fs::path elsewhere = dir.path / "elsewhere";
    fs::create_directories(elsewhere);
    fs::create_symlink(elsewhere, dir.path / "job");
    const std::string base = (dir.path / "job").string() + "/rank0-h-" + std::to_string(getpid());

    std::string why;
    CHECK_FALSE(write_file_atomic(base + ".report.json", "{}\n", &why));
    CHECK(why.find("job") != std::string::npos);
    CHECK_FALSE(write_file_atomic(base + ".dump.json", "{}\n", &why));

    // The rank file too: the shim records in memory then (and says so), never in the symlink's target.
    RankFileWriter w = create_rank_file(dir.path.string(), identity("job"), 256, 0);
    CHECK_FALSE(w.file_backed);
    CHECK(w.base != nullptr);
    CHECK(fs::is_empty(elsewhere));

    // A file in its place likewise.
    { std::ofstream(dir.path / "job2") << kVictim; }
    CHECK_FALSE(files::write_job_file(dir.path.string(), "job2", "x", "y", false, &why));
    CHECK(slurp(dir.path / "job2") == kVictim);
}

TEST_CASE("the job folder is made with 0750 and the rank file inside it with 0640, not followed") {
    TempDir dir("ncw_safe_write");
    RankFileWriter w = create_rank_file((dir.path / "root").string(), identity("fresh"), 256, 0);
    REQUIRE(w.file_backed);
    CHECK(mode_of(dir.path / "root" / "fresh") == (0750 & ~umask_now()));
    CHECK(mode_of(w.path) == (0640 & ~umask_now()));

    // A symlink planted at the rank file's own name (pids are guessable) is not written through either: the rank
    // takes another name (issue 28; test_dump_folder).
    const fs::path victim = dir.path / "victim";
    { std::ofstream(victim) << kVictim; }
    ProcessIdentity id = identity("fresh");
    id.pid = getpid() + 100000;
    const fs::path planted = dir.path / "root" / "fresh" / ("rank0-h-" + std::to_string(id.pid) + ".ncw");
    fs::create_symlink(victim, planted);
    RankFileWriter w2 = create_rank_file((dir.path / "root").string(), id, 256, 0);
    CHECK(w2.file_backed);
    CHECK(w2.path != planted.string());
    CHECK(slurp(victim) == kVictim);
}

TEST_CASE("write_job_file takes one folder name, never a path") {
    TempDir dir("ncw_safe_write");
    std::string why;
    for (const char* bad : {"", ".", "..", "a/b", "../x"}) {
        CHECK_FALSE(files::write_job_file(dir.path.string(), bad, "f", "t", false, &why));
        CHECK(!why.empty());
    }
    REQUIRE(files::write_job_file(dir.path.string(), "ok", "f", "t", false, &why));
    CHECK(slurp(dir.path / "ok" / "f") == "t");
}

// A dump folder someone else controls (issue 28, items 7 and 8): the rank file's name taken ahead (it holds the pid)
// costs the rank another name, not its file; a root or job folder others can write to without the sticky bit, or
// that another user owns, is warned about once; and every failed write of the watchdog's files is logged once each,
// the report's after the dump's (shim/record/rank_file_writer.h, shim/watch/dump_writer.h, read/safe_write.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "read/rank_file.h"
#include "shim/base/log.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/runtime.h"
#include "shim/watch/dump_writer.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;
namespace fs = std::filesystem;

namespace {

const char* const kVictim = "victim: must stay as it is\n";

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// What the shim's logger writes to stderr while `body` runs, through a pipe (not a file: the failed-write test lowers
// RLIMIT_FSIZE meanwhile, which a pipe does not answer to). The output of these tests is a few lines: the pipe holds
// it.
template <class Body>
std::string stderr_of(Body&& body) {
    int p[2];
    REQUIRE(pipe(p) == 0);
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    body();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    close(p[0]);
    return out;
}

size_t count_lines_with(const std::string& text, const std::vector<std::string>& parts) {
    size_t n = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        bool all = true;
        for (const auto& p : parts) all = all && line.find(p) != std::string::npos;
        n += all;
    }
    return n;
}

ProcessIdentity identity(const std::string& job, int64_t pid) {
    ProcessIdentity id = test_identity(job);
    id.host = "h";
    id.pid = pid;
    return id;
}

}  // namespace

TEST_CASE("a rank file name taken ahead (a planted symlink) costs the rank another name, not its file") {
    set_log_level("info");
    TempDir dir("ncw_dump_folder");
    const fs::path job = dir.path / "job";
    fs::create_directories(job);
    const fs::path victim = dir.path / "victim";
    { std::ofstream(victim) << kVictim; }
    const int64_t pid = getpid() + 200000;  // a pid someone guessed: the name holds it
    const std::string stem = "rank0-h-" + std::to_string(pid);
    fs::create_symlink(victim, job / (stem + ".ncw"));
    fs::create_symlink(victim, job / (stem + ".1.ncw"));

    RankFileWriter w;
    const std::string err = stderr_of([&] { w = create_rank_file(dir.path.string(), identity("job", pid), 256, 0); });
    INFO(err);
    REQUIRE(w.file_backed);
    CHECK(w.path == (job / (stem + ".2.ncw")).string());
    CHECK(w.base_path == (job / (stem + ".2")).string());  // the report and dump go beside it
    CHECK(fs::is_regular_file(fs::symlink_status(w.path)));
    CHECK(slurp(victim) == kVictim);
    // Said once, naming the name taken and the one used instead; no "memory only".
    CHECK(count_lines_with(err, {"the rank file name " + (job / (stem + ".ncw")).string() + " is taken",
                                 "recording to " + w.path + " instead"}) == 1);
    CHECK(err.find("memory only") == std::string::npos);

    // The readers find it (any *.ncw) and read the rank from its header, not its name.
    const auto listed = list_rank_files(job.string());
    CHECK(std::find(listed.begin(), listed.end(), w.path) != listed.end());
    RankFile f;
    REQUIRE(f.open(w.path));
    CHECK(f.header().pid == pid);
    CHECK(f.header().global_rank == 0);
    // Its report goes beside it, under the same name.
    std::string why;
    CHECK(write_file_atomic(w.base_path + ".report.json", "{}\n", &why));
    CHECK(fs::is_regular_file(job / (stem + ".2.report.json")));
}

TEST_CASE("every guessable name taken: the rank still gets a file, under a name no one can guess") {
    set_log_level("info");
    TempDir dir("ncw_dump_folder");
    const fs::path job = dir.path / "job";
    fs::create_directories(job);
    const int64_t pid = getpid() + 300000;
    const std::string stem = "rank0-h-" + std::to_string(pid);
    for (const char* alt : {"", ".1", ".2", ".3"})
        fs::create_symlink(dir.path / "nowhere", job / (stem + alt + ".ncw"));
    RankFileWriter w;
    const std::string err = stderr_of([&] { w = create_rank_file(dir.path.string(), identity("job", pid), 256, 0); });
    INFO(err);
    REQUIRE(w.file_backed);
    CHECK(w.path.rfind((job / stem).string() + ".", 0) == 0);
    CHECK(fs::is_regular_file(fs::symlink_status(w.path)));
    CHECK(!fs::exists(dir.path / "nowhere"));
    CHECK(count_lines_with(err, {"is taken", w.path}) == 1);
}

TEST_CASE("a dump root others can write to without the sticky bit is warned about once, the rank still recorded") {
    set_log_level("info");
    TempDir dir("ncw_dump_folder");
    const fs::path root = dir.path / "root";
    fs::create_directories(root);
    struct Case {
        mode_t mode;
        const char* words;  // "" : no warning
    };
    for (const Case c : {Case{0777, "is writable by everyone (mode 0777) without the sticky bit: chmod go-w "},
                         Case{0770, "is writable by its group (mode 0770) without the sticky bit: chmod go-w "},
                         Case{01777, ""}, Case{0755, ""}}) {
        INFO("mode " << std::oct << c.mode);
        REQUIRE(chmod(root.c_str(), c.mode) == 0);
        RankFileWriter w;
        const std::string job = "job" + std::to_string(c.mode);
        const std::string err =
            stderr_of([&] { w = create_rank_file(root.string(), identity(job, getpid()), 256, 0); });
        INFO(err);
        CHECK(w.file_backed);  // warned, never refused
        if (*c.words) {
            CHECK(count_lines_with(
                      err, {"the dump folder is not yours alone", root.string() + " " + c.words + root.string()}) == 1);
            CHECK(count_lines_with(err, {"not yours alone"}) == 1);  // one line, the job folder (ours, 0750) not named
        } else {
            CHECK(err.find("not yours alone") == std::string::npos);
        }
    }
}

TEST_CASE("a job folder made ahead by someone else, writable by all, is named in the one warning") {
    set_log_level("info");
    TempDir dir("ncw_dump_folder");
    const fs::path job = dir.path / "root" / "job";
    fs::create_directories(job);
    REQUIRE(chmod(job.c_str(), 0777) == 0);
    const bool can_chown = geteuid() == 0;
    if (can_chown) REQUIRE(chown(job.c_str(), 65534, 65534) == 0);  // nobody's: a folder another user owns
    RankFileWriter w;
    const std::string err =
        stderr_of([&] { w = create_rank_file((dir.path / "root").string(), identity("job", getpid()), 256, 0); });
    INFO(err);
    CHECK(w.file_backed);
    CHECK(count_lines_with(err, {"not yours alone"}) == 1);
    CHECK(count_lines_with(err, {job.string() + " is writable by everyone (mode 0777) without the sticky bit"}) == 1);
    if (can_chown) CHECK(count_lines_with(err, {job.string() + " is owned by uid 65534, not by this user"}) == 1);
}

TEST_CASE("a failed dump write and then a failed report write are each logged once, with the path and the reason") {
    // A full disk cannot be made here; its stand-in is RLIMIT_FSIZE: the temporary file is created, then write()
    // fails part way (EFBIG where a full disk gives ENOSPC), at the same step and through the same path of the code.
    set_log_level("info");
    TempDir dir("ncw_dump_folder");
    auto* rt = new Runtime;  // leaked, as in the shim
    rt->id = identity("job", getpid());
    rt->file = create_rank_file(dir.path.string(), rt->id, 256, 0);
    REQUIRE(rt->file.file_backed);
    DumpWriter dw(*rt);

    struct rlimit old {};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct sigaction ign {
    }, old_sa{};
    ign.sa_handler = SIG_IGN;
    REQUIRE(sigaction(SIGXFSZ, &ign, &old_sa) == 0);  // write() then fails with EFBIG instead of killing us
    bool dumped = true, dumped_again = true;
    const std::string err = stderr_of([&] {
        struct rlimit tiny = old;
        tiny.rlim_cur = 64;
        setrlimit(RLIMIT_FSIZE, &tiny);
        dumped = dw.write_dump("test", disk::PyStacksReason::DumpRequest, false);
        dw.report_collector_verdict("NOT_JOINED: the first verdict");
        dumped_again = dw.write_dump("test", disk::PyStacksReason::DumpRequest, false);
        dw.report_collector_verdict("NOT_JOINED: the second verdict");
        setrlimit(RLIMIT_FSIZE, &old);
    });
    sigaction(SIGXFSZ, &old_sa, nullptr);
    INFO(err);
    CHECK_FALSE(dumped);
    CHECK_FALSE(dumped_again);
    const std::string reason = strerror(EFBIG);
    CHECK(count_lines_with(err, {"cannot write the dump", rt->file.base_path + ".dump.json", reason}) == 1);
    CHECK(count_lines_with(err, {"cannot write the report file", rt->file.base_path + ".report.json", reason}) == 1);
    CHECK(count_lines_with(err, {"cannot write"}) == 2);  // each once, not at every event
    // Nothing half-written is left: no dump, no report, no temporary.
    for (const auto& e : fs::directory_iterator(dir.path / "job")) CHECK(e.path().extension() == ".ncw");

    // Once the disk has room again, both are written.
    CHECK(dw.write_dump("test", disk::PyStacksReason::DumpRequest, false));
    dw.record_collector_verdict("NOT_JOINED: the third verdict");
    CHECK(fs::is_regular_file(rt->file.base_path + ".dump.json"));
    CHECK(slurp(rt->file.base_path + ".report.json").find("the third verdict") != std::string::npos);
}

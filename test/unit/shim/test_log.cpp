// The prefix of the shim's stderr lines (shim/base/log.h): short by default, "[ncclwatch r3] ", the full form with the
// pid, the time and the level under NCCLWATCH_LOG_FORMAT=full.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "shim/base/log.h"
#include "temp_dir.h"

namespace {

// What the shim's logger writes to stderr while `body` runs.
template <class Body>
std::string stderr_of(Body&& body) {
    TempDir dir;
    const std::string path = dir.file("err");
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    body();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("the short prefix names the rank, the full one the pid, the time and the level") {
    CHECK(ncw::log_prefix(3, false) == "[ncclwatch r3] ");
    CHECK(ncw::log_prefix(-1, false) == "[ncclwatch] ");
    CHECK(ncw::log_prefix(3, true) == "[ncclwatch rank 3 pid ");

    ncw::set_log_level("info");
    ncw::set_log_format(false);
    ncw::set_log_rank(3);
    std::string out = stderr_of([] {
        ncw::log().error("NOT_JOINED: rank 2 never issued AllReduce #10");
        ncw::log().debug("not at info");
    });
    CHECK(out == "[ncclwatch r3] NOT_JOINED: rank 2 never issued AllReduce #10\n");

    ncw::set_log_format(true);
    out = stderr_of([] { ncw::log().error("NOT_JOINED: rank 2"); });
    const std::string pid = std::to_string(getpid());
    INFO(out);
    CHECK(out.rfind("[ncclwatch rank 3 pid " + pid + " 20", 0) == 0);
    CHECK(out.find("] error: NOT_JOINED: rank 2\n") != std::string::npos);

    ncw::set_log_format(false);
    ncw::set_log_level("debug");
    out = stderr_of([] { ncw::log().debug("dump written"); });
    CHECK(out == "[ncclwatch r3] dump written\n");
    ncw::set_log_level("info");
}

// Issue 28, point 8: a value with a newline (NCCLWATCH_DIR, NCCL_PROFILER_PLUGIN) cannot start a line of its own, and
// a 100 KB one is cut (on 5405922 both went out raw: a forged "[ncclwatch r0] ..." line, 201 KB of stderr).
TEST_CASE("every line is one line of a sane length, whatever the values in it") {
    CHECK(ncw::one_line("plain text, UTF-8 kept: \xc3\xa9t\xc3\xa9") == "plain text, UTF-8 kept: \xc3\xa9t\xc3\xa9");
    CHECK(ncw::one_line("a\nb\rc\td\x1b[31me\x7f") == "a\\nb\\rc\\td\\x1b[31me\\x7f");
    const std::string big(100000, 'x');
    const std::string cut = ncw::one_line(big);
    CHECK(cut.size() < ncw::kMaxLogLineBytes + 32);
    CHECK(cut.substr(cut.size() - 18) == "... (100000 bytes)");
    // Cut at a character's start.
    std::string accents;
    for (int i = 0; i < 2000; ++i) accents += "\xc3\xa9";
    const std::string cut2 = ncw::one_line(accents, 7);
    CHECK(cut2 == "\xc3\xa9\xc3\xa9\xc3\xa9... (4000 bytes)");

    ncw::set_log_level("info");
    ncw::set_log_format(false);
    ncw::set_log_rank(1);
    const std::string forged = "/tmp/dir\n[ncclwatch r0] OK: no hang (forged)";
    std::string out = stderr_of([&] { ncw::log().warn("NCCL_PROFILER_PLUGIN={} is set", forged); });
    CHECK(out == "[ncclwatch r1] NCCL_PROFILER_PLUGIN=/tmp/dir\\n[ncclwatch r0] OK: no hang (forged) is set\n");
    out = stderr_of([&] { ncw::log().warn("NCCL_PROFILER_PLUGIN={} is set", big); });
    CHECK(out.size() < ncw::kMaxLogLineBytes + 64);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
}

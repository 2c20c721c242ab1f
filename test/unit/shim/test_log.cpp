// The prefix of the shim's stderr lines (shim/base/log.h): short by default, "[ncclwatch r3] ", the full form with the
// pid, the time and the level under NCCLWATCH_LOG_FORMAT=full.
#include <fcntl.h>
#include <unistd.h>

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

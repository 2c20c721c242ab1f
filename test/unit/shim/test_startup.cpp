// The start-up (shim/start/startup.cpp) in a process of its own: start_runtime reads the real environment and starts
// the shim's threads for good, so this binary holds nothing else. NCCL is the fake one (test/fake_nccl, whose path
// meson passes as FAKE_NCCL_LIB), found through NCCLWATCH_NCCL_LIBRARY as the resolver would find a real one; no
// libcuda is in the process, so GPU completion is not tracked.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "read/rank_file.h"
#include "shim/start/startup.h"
#include "temp_dir.h"

using namespace ncw;
namespace fs = std::filesystem;

namespace {

// The job's folder, kept until the process ends (the watchdog and the exit path write into it until then).
TempDir& root() {
    static TempDir dir("ncw_startup");
    return dir;
}

void set_env(const char* name, const std::string& value) { REQUIRE(setenv(name, value.c_str(), 1) == 0); }

// What a torchrun-launched rank 3 of 8 (local rank 1 of 4) with a few NCCLWATCH_* settings would have.
void launcher_env(const std::string& dir) {
    set_env("NCCLWATCH_DIR", dir);
    set_env("NCCLWATCH_JOB_ID", "startup-job");
    set_env("NCCLWATCH_TIMEOUT_SEC", "42.5");
    set_env("NCCLWATCH_RING_SIZE", "512");
    set_env("NCCLWATCH_LOG_LEVEL", "warn");
    set_env("RANK", "3");
    set_env("LOCAL_RANK", "1");
    set_env("WORLD_SIZE", "8");
    set_env("LOCAL_WORLD_SIZE", "4");
    unsetenv("NCCLWATCH_ENABLE");
    unsetenv("NCCLWATCH_COLLECTOR");
    const char* nccl = std::getenv("FAKE_NCCL_LIB");
    REQUIRE(nccl != nullptr);
    set_env("NCCLWATCH_NCCL_LIBRARY", nccl);
}

template <typename F>
void wait_until(F&& cond, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cond()) {
        if (std::chrono::steady_clock::now() > deadline) FAIL("timed out waiting for " << what);
        std::this_thread::yield();
    }
}

}  // namespace

// In a child process: a start that is turned off is never attempted again in the process, and this one's must not
// be. First here, while no thread of ours runs (the child of a process with threads could inherit a held lock).
TEST_CASE("NCCLWATCH_ENABLE=0: no runtime, no file, no thread, and the calls pass through") {
    TempDir off("ncw_startup_off");
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        launcher_env(off.path.string());
        setenv("NCCLWATCH_ENABLE", "0", 1);
        const bool none = start_runtime() == nullptr && start_runtime() == nullptr && runtime() == nullptr;
        _exit(none ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(fs::is_empty(off.path));
}

TEST_CASE("start_runtime creates the rank file with its header, starts the watchdog, and starts once") {
    const std::string dir = root().path.string();
    launcher_env(dir);
    REQUIRE(runtime() == nullptr);
    Runtime* rt = start_runtime();
    REQUIRE(rt != nullptr);
    CHECK(runtime() == rt);
    CHECK(start_runtime() == rt);

    CHECK(rt->cfg.timeout_sec == 42.5);
    CHECK(rt->cfg.ring_size == 512);
    CHECK(rt->id.global_rank == 3);
    CHECK(rt->id.job_id == "startup-job");
    CHECK(rt->tracker == nullptr);  // no libcuda in this process: completion on return
    CHECK(rt->nccl_version == 22809);
    REQUIRE(rt->file.file_backed);
    const fs::path path = rt->file.path;
    CHECK(path.parent_path() == fs::path(dir) / "startup-job");
    CHECK(path.filename().string().rfind("rank3-", 0) == 0);
    CHECK(path.extension() == ".ncw");

    RankFile f;
    REQUIRE(f.open(rt->file.path));
    HeaderInfo h = f.header();
    CHECK(h.pid == getpid());
    CHECK(h.global_rank == 3);
    CHECK(h.local_rank == 1);
    CHECK(h.world_size == 8);
    CHECK(h.local_world_size == 4);
    CHECK(h.host == this_hostname());
    CHECK(h.job_id == "startup-job");
    CHECK(h.nccl_version == 22809);
    CHECK(h.ring_capacity == 512);
    CHECK(h.bt_depth == 0);
    CHECK(h.process_state == uint32_t(disk::ProcessState::Running));
    CHECK(h.num_comms == 0);
    CHECK(h.boot_id_hash == this_boot_id_hash());
    // The timeout and the poll period this process runs with, for analyze (format 1.7's header); and the variables
    // as they were.
    CHECK(h.timeout_ms == 42500);
    CHECK(h.poll_ms == uint32_t(rt->cfg.poll_ms));
    const auto has = [&](const std::string& entry) {
        return std::find(h.env.begin(), h.env.end(), entry) != h.env.end();
    };
    CHECK(has("NCCLWATCH_TIMEOUT_SEC=42.5"));
    CHECK(has("LOCAL_RANK=1"));
    // The watchdog runs: its heartbeat moves.
    const uint64_t first = h.heartbeat_mono_ns;
    wait_until([&] { return f.header().heartbeat_mono_ns > first; }, "the watchdog's heartbeat");
    // The environment probe, once NCCL was resolved: its facts, among them the library NCCL came from.
    wait_until(
        [&] {
            h = f.header();
            return has("ncclwatch.probe=done");
        },
        "the environment probe's facts");
    CHECK(std::any_of(h.env.begin(), h.env.end(),
                      [](const std::string& e) { return e.rfind("ncclwatch.nccl_library=", 0) == 0; }));
    CHECK(f.header().timeout_ms == 42500);
}

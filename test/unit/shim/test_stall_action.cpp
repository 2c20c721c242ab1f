// NCCLWATCH_ACTION after a stall report (shim/watch/stall_action.h) against the fake NCCL (test/fake_nccl, found
// through NCCLWATCH_NCCL_LIBRARY as the resolver finds a real one): report leaves the communicator alone, abort revokes
// it (NCCL 2.28.7 and later) or aborts it (earlier), kill sends SIGABRT to the process.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "shim/record/runtime.h"
#include "shim/watch/stall_action.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;

namespace {

// The fake NCCL's own entry points, for the test's side of the communicator.
struct FakeNccl {
    void* lib = nullptr;
    decltype(&ncclCommInitAll) init_all = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclCommGetAsyncError) async_error = nullptr;

    FakeNccl() {
        const char* path = std::getenv("FAKE_NCCL_LIB");
        REQUIRE(path != nullptr);
        REQUIRE(setenv("NCCLWATCH_NCCL_LIBRARY", path, 1) == 0);  // where the shim's resolver finds it
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        REQUIRE(lib != nullptr);
        init_all = reinterpret_cast<decltype(init_all)>(dlsym(lib, "ncclCommInitAll"));
        all_reduce = reinterpret_cast<decltype(all_reduce)>(dlsym(lib, "ncclAllReduce"));
        async_error = reinterpret_cast<decltype(async_error)>(dlsym(lib, "ncclCommGetAsyncError"));
        REQUIRE(init_all);
        REQUIRE(all_reduce);
        REQUIRE(async_error);
    }
    // A communicator of one rank: nothing to wait for.
    ncclComm_t comm() const {
        ncclComm_t c = nullptr;
        REQUIRE(init_all(&c, 1, nullptr) == ncclSuccess);
        return c;
    }
    ncclResult_t one_all_reduce(ncclComm_t c) const {
        return all_reduce(nullptr, nullptr, 1, ncclFloat, ncclSum, c, nullptr);
    }
};

const FakeNccl& fake() {
    static FakeNccl f;
    return f;
}

struct Setup {
    TempDir dir{"ncw_action"};
    Runtime* rt = new Runtime;  // leaked, as in the shim
    CommRuntime* cr = nullptr;
    explicit Setup(Action action, int nccl_version) {
        rt->cfg.action = action;
        rt->nccl_version = nccl_version;
        rt->file = create_rank_file(dir.path.string(), test_identity("action"), 256, 0);
        cr = make_comm(rt->file, 0xac7);
        cr->comm = fake().comm();
        REQUIRE(rt->comms.insert(cr->comm, cr));
    }
    uint32_t state() const { return cr->slot.load()->state.load(); }
    // The action, then what the shim's side shows: the slot's state, and whether the communicator is still watched.
    void act(disk::CommState want, bool watched) {
        act_on_stall(*rt, *cr);
        CHECK(state() == uint32_t(want));
        CHECK(cr->destroyed.load() == !watched);
        CHECK((rt->comms.find(cr->comm) == cr) == watched);
    }
};

}  // namespace

TEST_CASE("report leaves the communicator as it is") {
    Setup x(Action::Report, 22809);
    x.act(disk::CommState::Active, true);
    CHECK(fake().one_all_reduce(x.cr->comm) == ncclSuccess);
}

TEST_CASE(
    "abort revokes the communicator with NCCL 2.28.7 on: its next operation fails, the framework still holds it") {
    Setup x(Action::Abort, 22807);
    x.act(disk::CommState::Revoked, true);
    CHECK(fake().one_all_reduce(x.cr->comm) == ncclInvalidUsage);
}

TEST_CASE("abort aborts the communicator with an older NCCL, which the shim then stops watching") {
    Setup x(Action::Abort, 22806);
    x.act(disk::CommState::Aborted, false);
    ncclResult_t err = ncclSuccess;
    CHECK(fake().async_error(x.cr->comm, &err) == ncclSuccess);
    CHECK(err == ncclSystemError);
}

TEST_CASE("kill ends the process with SIGABRT") {
    Setup x(Action::Kill, 22809);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        signal(SIGABRT, SIG_DFL);  // not the test framework's handler: the signal's own end
        act_on_stall(*x.rt, *x.cr);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
    CHECK(x.state() == uint32_t(disk::CommState::Active));
}

// What the shim knows of each NCCL version (issue 44): the API table's SINCE column, the profiler version each NCCL
// takes and its descriptor, and the versions whose profiler the shim leaves off (NCW_PROFILER_REGRESSIONS).
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "ncclwatch/api_table.h"
#include "ncclwatch/nccl_newer_api.h"
#include "ncclwatch/nccl_profiler_abi.h"
#include "shim/base/resolver.h"
#include "shim/complete/profiler_plugin.h"

using namespace ncw;

namespace {

struct Entry {
    std::string name;
    int since;
};

std::vector<Entry> table_entries() {
    std::vector<Entry> v;
#define NCW_T_OP(name, since, params, args, desc) v.push_back({#name, since});
#define NCW_T_CONFIG(name, since, plain, params, args, plain_args, desc) v.push_back({#name, since});
#define NCW_T_HOOKED(name, since, params, args) v.push_back({#name, since});
    NCW_NCCL_OPS(NCW_T_OP)
    NCW_NCCL_CONFIG_OPS(NCW_T_CONFIG)
    NCW_NCCL_HOOKED(NCW_T_HOOKED)
#undef NCW_T_OP
#undef NCW_T_CONFIG
#undef NCW_T_HOOKED
    return v;
}

int since_of(const std::string& name) {
    for (const Entry& e : table_entries())
        if (e.name == name) return e.since;
    return -1;
}

}  // namespace

TEST_CASE("the API table names each entry point once, with the NCCL version that introduced it") {
    std::set<std::string> seen;
    for (const Entry& e : table_entries()) {
        INFO(e.name);
        CHECK(seen.insert(e.name).second);
        CHECK((e.since == 0 || (e.since >= 22100 && e.since < 30000)));
    }
    // From NCCL's public headers (nccl.h of each release's first tag that has it).
    CHECK(since_of("ncclAllReduce") == 0);
    CHECK(since_of("ncclGroupSimulateEnd") == 22203);
    CHECK(since_of("ncclCommInitRankScalable") == 22304);
    CHECK(since_of("ncclCommShrink") == 22703);
    CHECK(since_of("ncclAlltoAll") == 22803);
    CHECK(since_of("ncclCommRevoke") == 22807);
    CHECK(since_of("ncclPutSignal") == 22902);
    CHECK(since_of("ncclCommGrow") == 22902);
    CHECK(since_of("ncclCommSuspend") == 22907);
    CHECK(since_of("ncclAllReduceConfig") == 23102);
}

TEST_CASE("each config form is its plain collective's, newer than it") {
    int n = 0;
#define NCW_T_PAIR(name, since, plain, params, args, plain_args, desc) \
    {                                                                  \
        INFO(#name);                                                   \
        CHECK(std::string(#name) == std::string(#plain) + "Config");   \
        CHECK(since > since_of(#plain));                               \
        ++n;                                                           \
    }
    NCW_NCCL_CONFIG_OPS(NCW_T_PAIR)
#undef NCW_T_PAIR
    CHECK(n == 8);  // 2.31: every collective, no send or receive
}

TEST_CASE("ncclCollConfig_t as 2.31 and 2.32 lay it out") {
    CHECK(sizeof(nccl_abi::CollConfig) == 72);  // 2.32's, with launchCompletionEvent; 2.31's ends at 64
    CHECK(offsetof(nccl_abi::CollConfig, user_profiler_tag) == 56);
    CHECK(sizeof(nccl_abi::WaitSignalDesc) == 16);
}

TEST_CASE("the profiler is left off only where its cost is known to regress") {
    CHECK(profiler_regression(22606) == nullptr);  // 2.26: v3
    CHECK(profiler_regression(22809) == nullptr);  // 2.28.9, torch 2.11's
    CHECK(profiler_regression(22907) == nullptr);
    CHECK(profiler_regression(23007) == nullptr);
    const char* why = profiler_regression(23102);  // 2.31.2: kernel-phase writes and a fence with KernelCh on
    REQUIRE(why != nullptr);
    CHECK(std::strstr(why, "2355") != nullptr);
    CHECK(profiler_regression(23199) != nullptr);
    CHECK(profiler_regression(23203) == nullptr);  // 2.32: no regression known
}

TEST_CASE("profiler v7's descriptor: the tags move the tails of what the shim reads") {
    // offsetof is checked at compile time in nccl_profiler_abi.h; here, the members v5 and v7 share sit alike up to
    // the Coll's parent group, and v7's KernelPhase bit is NCCL's.
    CHECK(offsetof(prof::DescrV7, coll.seq) == offsetof(prof::DescrV5, coll.seq));
    CHECK(offsetof(prof::DescrV7, coll.parent_group) == offsetof(prof::DescrV5, coll.parent_group));
    CHECK(offsetof(prof::DescrV7, p2p.parent_group) == offsetof(prof::DescrV5, p2p.parent_group));
    CHECK(offsetof(prof::DescrV7, coll_api.graph_captured) == offsetof(prof::DescrV5, coll_api.graph_captured));
    CHECK(offsetof(prof::DescrV7, kernel_ch.gpu_timer) == offsetof(prof::DescrV5, kernel_ch.gpu_timer));
    CHECK(prof::kKernelPhase == (1u << 15));
}

TEST_CASE("an entry point the loaded NCCL lacks is found absent once, then costs a load") {
    // The test NCCL presents itself as 2.28.9: no config forms, no one-sided calls.
    const char* path = std::getenv("FAKE_NCCL_LIB");
    REQUIRE(path != nullptr);
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    CHECK(real_available(real::ncclAllReduce));
    CHECK_FALSE(real_available(real::ncclAllReduceConfig));
    CHECK(real::ncclAllReduceConfig.absent.load());
    CHECK_FALSE(real_available(real::ncclPutSignal));
    CHECK(real::ncclPutSignal.absent.load());
    CHECK(resolve_slow(real::ncclPutSignal, true) == nullptr);
    CHECK_FALSE(real::ncclAllReduce.absent.load());
}

// fake_nccl_versions_selftest VARIANT CODE PROBE_ALL PROBE_V4: one variant of the test NCCL (libnccl-2.31.so.2 & co),
// loaded RTLD_LOCAL as a framework loads NCCL, presents the NCCL of CODE:
//   - its ncclGetVersion;
//   - the profiler table it takes, newest first from its version's newest (2.21 none, 2.26 v3, 2.28 v5, 2.29 v6,
//     2.31 and 2.32 v7), under the cap FAKE_NCCL_PROFILER_VERSION, and down to what an older plugin has (PROBE_V4:
//     v3 and v4 only); each table's events read in its own descriptor layout, by the probe plugin
//     (fake_profiler_probe.cpp);
//   - 2.31+: the eight nccl*Config collectives run as their plain forms (NULL config or NCCL's), refuse a config that
//     is not NCCL's (magic, size), and pass its userProfilerTag to the v7 descriptors (0 for a plain call);
//   - 2.29+: the one-sided calls, CommSuspend/Resume, CommGetUniqueId and WinGetUserPtr succeed on a communicator,
//     CommGrow says the double does not grow one.
// Each case runs in a child process of its own: NCCL chooses its profiler plugin once per process. Two ranks in one
// thread (ncclCommInitAll, every op in a group, as nccl-tests -g), so that the ops complete.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "fake_profiler_probe.h"
#include "ncclwatch/nccl_newer_api.h"
#include "ncclwatch/nccl_profiler_abi.h"

#if NCCL_VERSION_CODE < 22900
// 2.29's, which nccl_newer_api.h does not declare (the shim neither intercepts nor calls them): for decltype only.
extern "C" ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
extern "C" ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
#endif

namespace {

using namespace ncw;

const char* g_variant;
int g_code;
int g_failures;  // in the child: this case's

#define EXPECT(cond, ...)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                   \
            std::fprintf(stderr, "\n");                                          \
            ++g_failures;                                                        \
        }                                                                        \
    } while (0)

struct Nccl {
    void* lib = nullptr;
    template <class Fn>
    Fn get(const char* name) const {
        return reinterpret_cast<Fn>(dlsym(lib, name));
    }
};

#define NCCL_FN(n, name) auto name = n.get<decltype(&::name)>(#name)

int buffer[64];  // never read: the double touches no buffer

// The two ranks' communicators.
struct Pair {
    ncclComm_t c[2] = {nullptr, nullptr};
};

// Runs op(comm) on both ranks in one group, and says whether every call and the group succeeded.
template <class Op>
bool on_both(const Nccl& n, const Pair& p, Op op) {
    NCCL_FN(n, ncclGroupStart);
    NCCL_FN(n, ncclGroupEnd);
    bool ok = ncclGroupStart() == ncclSuccess;
    for (ncclComm_t c : p.c) ok = op(c) == ncclSuccess && ok;
    return ncclGroupEnd() == ncclSuccess && ok;
}

nccl_abi::CollConfig config_with(uint64_t tag) {
    nccl_abi::CollConfig c{};
    c.size = sizeof c;  // 2.32's: what lies past 2.31's members is not read
    c.magic = nccl_abi::kApiMagic;
    c.version = 23203;
    c.min_ctas = c.max_ctas = c.nvls_ctas = c.cga_cluster_size = c.cta_policy = INT_MIN;
    c.user_profiler_tag = tag;
    return c;
}
const ncw_coll_config_t* as_config(const nccl_abi::CollConfig& c) {
    return reinterpret_cast<const ncw_coll_config_t*>(&c);
}

// The profiler case: the plugin `probe` (a path), the cap (nullptr: none), the table NCCL must take.
void profiler_case(const char* probe, const char* cap, int want) {
    setenv("NCCL_PROFILER_PLUGIN", probe, 1);
    if (cap) setenv("FAKE_NCCL_PROFILER_VERSION", cap, 1);
    Nccl n;
    n.lib = dlopen(g_variant, RTLD_NOW | RTLD_LOCAL);
    EXPECT(n.lib != nullptr, "dlopen(%s): %s", g_variant, dlerror());
    if (!n.lib) return;
    NCCL_FN(n, ncclGetVersion);
    NCCL_FN(n, ncclCommInitAll);
    NCCL_FN(n, ncclAllReduce);
    NCCL_FN(n, ncclSend);
    NCCL_FN(n, ncclRecv);
    NCCL_FN(n, ncclCommDestroy);
    int version = 0;
    EXPECT(ncclGetVersion(&version) == ncclSuccess && version == g_code, "ncclGetVersion %d, want %d", version, g_code);

    Pair p;
    EXPECT(ncclCommInitAll(p.c, 2, nullptr) == ncclSuccess, "ncclCommInitAll");
    EXPECT(on_both(n, p, [&](ncclComm_t c) { return ncclAllReduce(buffer, buffer, 16, ncclFloat32, ncclSum, c, 0); }),
           "plain all_reduce");
    EXPECT(on_both(n, p,
                   [&](ncclComm_t c) {
                       const int peer = c == p.c[0] ? 1 : 0;
                       ncclResult_t r = ncclSend(buffer, 16, ncclFloat32, peer, c, 0);
                       return r == ncclSuccess ? ncclRecv(buffer, 16, ncclFloat32, peer, c, 0) : r;
                   }),
           "send/recv");
    const bool config_forms = g_code >= 23102;
    if (config_forms) {
        NCCL_FN(n, ncclAllReduceConfig);
        EXPECT(ncclAllReduceConfig != nullptr, "NCCL %d has no ncclAllReduceConfig", g_code);
        if (!ncclAllReduceConfig) return;
        const nccl_abi::CollConfig cfg = config_with(42);
        EXPECT(on_both(n, p,
                       [&](ncclComm_t c) {
                           return ncclAllReduceConfig(buffer, buffer, 16, ncclFloat32, ncclSum, c, 0, as_config(cfg));
                       }),
               "ncclAllReduceConfig");
    }
    for (ncclComm_t c : p.c) ncclCommDestroy(c);

    void* plugin = dlopen(probe, RTLD_NOW | RTLD_NOLOAD);
    auto log_fn =
        plugin ? reinterpret_cast<const fake::ProbeLog* (*)()>(dlsym(plugin, "fake_profiler_probe_log")) : nullptr;
    if (want == 0) {
        // No table looked up at all (2.21): the plugin need not even be loaded; if it is, nothing was called.
        EXPECT(!log_fn || log_fn()->inits == 0, "NCCL %d took table v%d, want none", g_code, log_fn()->init_version);
        return;
    }
    EXPECT(log_fn != nullptr, "NCCL %d did not load the plugin %s", g_code, probe);
    if (!log_fn) return;
    const fake::ProbeLog& log = *log_fn();
    EXPECT(log.init_version == want && log.inits == 2, "NCCL %d (cap %s): table v%d (%d inits), want v%d (2 inits)",
           g_code, cap ? cap : "none", log.init_version, log.inits, want);

    // What each collective's events said, in the table's own layout: its Coll (and v5+ its CollApi) names it, and v7
    // carries the call's tag, 0 for the plain call, 42 for the Config one.
    int colls[2] = {0, 0}, apis[2] = {0, 0}, p2p = 0;
    for (int i = 0; i < log.events; ++i) {
        const fake::ProbeEvent& e = log.ev[i];
        EXPECT(e.table == want, "an event through table v%d, want v%d", e.table, want);
        const bool coll = e.type == prof::kColl, api = e.type == prof::kCollApi;
        if (e.type == prof::kP2p || e.type == prof::kP2pApi) {
            ++p2p;
            EXPECT(std::strcmp(e.func, "Send") == 0 || std::strcmp(e.func, "Recv") == 0, "a P2p event of '%s'", e.func);
            EXPECT(e.user_tag == 0, "a send or receive with user tag %llu", (unsigned long long)e.user_tag);
        }
        if (!coll && !api) continue;
        EXPECT(std::strcmp(e.func, "AllReduce") == 0, "a %s event of '%s', want AllReduce", coll ? "Coll" : "CollApi",
               e.func);
        EXPECT(e.user_tag == 0 || e.user_tag == 42, "user tag %llu", (unsigned long long)e.user_tag);
        EXPECT(want == 7 || e.user_tag == 0, "v%d carries a user tag", want);
        (coll ? colls : apis)[e.user_tag == 42]++;
        if (coll)
            EXPECT(e.kernel_variant == (want == 7), "kernel variant %s under v%d",
                   e.kernel_variant ? "named" : "not named", want);
    }
    const int tagged = config_forms && want == 7 ? 2 : 0;  // one Config all_reduce on each rank
    const int untagged = 2 + (config_forms && want != 7 ? 2 : 0);
    EXPECT(colls[0] == untagged && colls[1] == tagged, "Coll events: %d untagged, %d tagged; want %d and %d", colls[0],
           colls[1], untagged, tagged);
    const int api_untagged = want >= 5 ? untagged : 0, api_tagged = want >= 5 ? tagged : 0;  // CollApi: v5+
    EXPECT(apis[0] == api_untagged && apis[1] == api_tagged, "CollApi events: %d untagged, %d tagged; want %d and %d",
           apis[0], apis[1], api_untagged, api_tagged);
    // v5+: a P2pApi and a P2p event per send and receive (2 ranks, one each); the older tables get none from the fake.
    EXPECT(p2p == (want >= 5 ? 8 : 0), "%d P2p/P2pApi events, want %d", p2p, want >= 5 ? 8 : 0);
}

// The entry points of 2.29 and 2.31 on a communicator pair.
void api_case() {
    Nccl n;
    n.lib = dlopen(g_variant, RTLD_NOW | RTLD_LOCAL);
    EXPECT(n.lib != nullptr, "dlopen(%s): %s", g_variant, dlerror());
    if (!n.lib) return;
    NCCL_FN(n, ncclCommInitAll);
    NCCL_FN(n, ncclCommDestroy);
    Pair p;
    EXPECT(ncclCommInitAll(p.c, 2, nullptr) == ncclSuccess, "ncclCommInitAll");
    const bool has_229 = g_code >= 22902, has_2297 = g_code >= 22907, has_231 = g_code >= 23102;
    EXPECT((n.get<void*>("ncclPutSignal") != nullptr) == has_229, "ncclPutSignal exported: %d",
           n.get<void*>("ncclPutSignal") != nullptr);
    EXPECT((n.get<void*>("ncclCommSuspend") != nullptr) == has_2297, "ncclCommSuspend exported");
    EXPECT((n.get<void*>("ncclAllReduceConfig") != nullptr) == has_231, "ncclAllReduceConfig exported");
    if (has_229) {
        NCCL_FN(n, ncclPutSignal);
        NCCL_FN(n, ncclSignal);
        NCCL_FN(n, ncclWaitSignal);
        NCCL_FN(n, ncclCommGrow);
        NCCL_FN(n, ncclCommGetUniqueId);
        NCCL_FN(n, ncclWinGetUserPtr);
        NCCL_FN(n, ncclCommWindowRegister);
        ncclWindow_t win = nullptr;
        EXPECT(ncclCommWindowRegister(p.c[1], buffer, sizeof buffer, &win, 0) == ncclSuccess, "window");
        EXPECT(ncclPutSignal(buffer, 4, ncclFloat32, 1, win, 0, 0, 0, 0, p.c[0], 0) == ncclSuccess, "ncclPutSignal");
        EXPECT(ncclPutSignal(buffer, 4, ncclFloat32, 2, win, 0, 0, 0, 0, p.c[0], 0) == ncclInvalidArgument,
               "ncclPutSignal to rank 2 of 2");
        EXPECT(ncclSignal(0, 0, 0, 0, p.c[1], 0) == ncclSuccess, "ncclSignal");
        nccl_abi::WaitSignalDesc d{1, 0, 0, 0};
        EXPECT(ncclWaitSignal(1, reinterpret_cast<ncw_wait_signal_desc_t*>(&d), p.c[1], 0) == ncclSuccess,
               "ncclWaitSignal");
        EXPECT(ncclPutSignal(buffer, 4, ncclFloat32, 1, win, 0, 0, 0, 0, nullptr, 0) == ncclInvalidArgument,
               "ncclPutSignal without a communicator");
        void* user = nullptr;
        EXPECT(ncclWinGetUserPtr(p.c[1], win, &user) == ncclSuccess && user == buffer, "ncclWinGetUserPtr");
        ncclUniqueId id;
        EXPECT(ncclCommGetUniqueId(p.c[0], &id) == ncclSuccess, "ncclCommGetUniqueId");
        ncclComm_t grown = p.c[0];
        EXPECT(ncclCommGrow(p.c[0], 3, &id, -1, &grown, nullptr) == ncclInvalidUsage && grown == nullptr,
               "ncclCommGrow: the double does not grow communicators");
    }
    if (has_2297) {
        NCCL_FN(n, ncclCommSuspend);
        NCCL_FN(n, ncclCommResume);
        EXPECT(ncclCommSuspend(p.c[0], 1) == ncclSuccess && ncclCommResume(p.c[0]) == ncclSuccess, "suspend/resume");
        EXPECT(ncclCommSuspend(nullptr, 1) == ncclInvalidArgument, "ncclCommSuspend without a communicator");
    }
    if (has_231) {
        NCCL_FN(n, ncclAllReduceConfig);
        NCCL_FN(n, ncclBroadcastConfig);
        NCCL_FN(n, ncclReduceConfig);
        NCCL_FN(n, ncclAllGatherConfig);
        NCCL_FN(n, ncclReduceScatterConfig);
        NCCL_FN(n, ncclAlltoAllConfig);
        NCCL_FN(n, ncclGatherConfig);
        NCCL_FN(n, ncclScatterConfig);
        // Every form with every config: NULL and NCCL's run (on both ranks, a group each); a foreign magic or a size
        // short of 2.31's members is refused at the call, with nothing posted (one rank alone: it would block).
        nccl_abi::CollConfig good = config_with(7), bad_magic = config_with(7), short_size = config_with(7);
        bad_magic.magic = 0x12345678;
        short_size.size = offsetof(nccl_abi::CollConfig, user_profiler_tag);
        const struct {
            const nccl_abi::CollConfig* config;
            ncclResult_t want;
            const char* what;
        } configs[] = {{nullptr, ncclSuccess, "NULL"},
                       {&good, ncclSuccess, "NCCL's"},
                       {&bad_magic, ncclInvalidArgument, "a foreign magic"},
                       {&short_size, ncclInvalidArgument, "a short size"}};
        for (const auto& k : configs) {
            const ncw_coll_config_t* cfg = k.config ? as_config(*k.config) : nullptr;
            auto each = [&](const char* name, auto call) {
                if (k.want == ncclSuccess) {
                    EXPECT(on_both(n, p, call), "%s with %s config", name, k.what);
                } else {
                    const ncclResult_t r = call(p.c[0]);
                    EXPECT(r == k.want, "%s with %s config: %d, want %d", name, k.what, int(r), int(k.want));
                }
            };
            each("ncclAllReduceConfig",
                 [&](ncclComm_t c) { return ncclAllReduceConfig(buffer, buffer, 8, ncclFloat32, ncclSum, c, 0, cfg); });
            each("ncclBroadcastConfig",
                 [&](ncclComm_t c) { return ncclBroadcastConfig(buffer, buffer, 8, ncclFloat32, 1, c, 0, cfg); });
            each("ncclReduceConfig",
                 [&](ncclComm_t c) { return ncclReduceConfig(buffer, buffer, 8, ncclFloat32, ncclSum, 1, c, 0, cfg); });
            each("ncclAllGatherConfig",
                 [&](ncclComm_t c) { return ncclAllGatherConfig(buffer, buffer, 8, ncclFloat32, c, 0, cfg); });
            each("ncclReduceScatterConfig", [&](ncclComm_t c) {
                return ncclReduceScatterConfig(buffer, buffer, 8, ncclFloat32, ncclSum, c, 0, cfg);
            });
            each("ncclAlltoAllConfig",
                 [&](ncclComm_t c) { return ncclAlltoAllConfig(buffer, buffer, 8, ncclFloat32, c, 0, cfg); });
            each("ncclGatherConfig",
                 [&](ncclComm_t c) { return ncclGatherConfig(buffer, buffer, 8, ncclFloat32, 0, c, 0, cfg); });
            each("ncclScatterConfig",
                 [&](ncclComm_t c) { return ncclScatterConfig(buffer, buffer, 8, ncclFloat32, 0, c, 0, cfg); });
        }
        // As its plain form: the same argument checks.
        EXPECT(ncclBroadcastConfig(buffer, buffer, 8, ncclFloat32, 2, p.c[0], 0, nullptr) == ncclInvalidArgument,
               "ncclBroadcastConfig from root 2 of 2");
    }
    for (ncclComm_t c : p.c) ncclCommDestroy(c);
}

// Runs one case in a child; returns whether it passed.
template <class Case>
bool in_child(const char* name, Case run) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        run();
        std::fflush(nullptr);
        _exit(g_failures == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", name);
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: fake_nccl_versions_selftest VARIANT CODE PROBE_ALL PROBE_V4\n");
        return 2;
    }
    g_variant = argv[1];
    g_code = std::atoi(argv[2]);
    const char* probe_all = argv[3];
    const char* probe_v4 = argv[4];
    unsetenv("FAKE_NCCL_PROFILER_VERSION");
    // The newest table each NCCL looks up (NCCL's src/plugin/profiler.cc of each release), written out here rather
    // than taken from fake_nccl_version.h, which is what is under test.
    int newest = -1;
    for (const auto& [code, table] : {std::pair{22105, 0}, {22606, 3}, {22809, 5}, {22907, 6}, {23102, 7}, {23203, 7}})
        if (code == g_code) newest = table;
    if (newest < 0) {
        std::fprintf(stderr, "fake_nccl_versions_selftest: no expectation for NCCL_VERSION_CODE %d\n", g_code);
        return 2;
    }
    const std::string v = std::to_string(g_code);
    bool ok = true;
    ok &= in_child(("NCCL " + v + ": table v" + std::to_string(newest) + " of a plugin with every table").c_str(),
                   [&] { profiler_case(probe_all, nullptr, newest); });
    ok &= in_child(("NCCL " + v + ": capped at v4").c_str(),
                   [&] { profiler_case(probe_all, "4", newest < 4 ? newest : 4); });
    ok &=
        in_child(("NCCL " + v + ": capped at v3").c_str(), [&] { profiler_case(probe_all, "3", newest < 3 ? 0 : 3); });
    ok &= in_child(("NCCL " + v + ": a plugin of v3 and v4 only").c_str(),
                   [&] { profiler_case(probe_v4, nullptr, newest < 4 ? newest : 4); });
    ok &= in_child(("NCCL " + v + ": the entry points of 2.29 and 2.31").c_str(), [] { api_case(); });
    return ok ? 0 : 1;
}

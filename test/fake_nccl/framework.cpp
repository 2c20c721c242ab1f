// libfakeframework.so: a training-like scenario that plays the part of libtorch_cuda. It links libnccl.so.2 and makes
// every NCCL call itself, so a preloaded shim sees the calls come from a library that was loaded RTLD_LOCAL.
//
// Exit codes of fw_run: 0 done, 2 usage or environment error, 3 an NCCL call failed; --exit-code for --exit-rank.
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fake_cuda.h"
#include "fw_options.h"
#include "ncclwatch/nccl_newer_api.h"

namespace ncw::fw {
namespace {

constexpr int kUsageError = 2;
constexpr int kNcclError = 3;

int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The test API of the fake libcuda.so.1 (--fake-cuda).
struct FakeCuda {
    decltype(&fakecuda_enqueue) enqueue = nullptr;
    decltype(&fakecuda_set_capturing) set_capturing = nullptr;
    decltype(&fakecuda_stats) stats = nullptr;
    decltype(&fakecuda_stream_records) stream_records = nullptr;
    decltype(&fakecuda_last_capture) last_capture = nullptr;
    // The CUDA runtime's graph calls (the fake libcudart.so.13), found as the program finds them: the shim's when it
    // is preloaded.
    int (*graph_instantiate)(void**, void*, unsigned long long) = nullptr;
    int (*graph_launch)(void*, void*) = nullptr;
    // Its events, stream waits and synchronisations (--torch-sync), found the same way.
    int (*event_create)(void**) = nullptr;
    int (*event_destroy)(void*) = nullptr;
    int (*event_record)(void*, cudaStream_t) = nullptr;
    int (*event_query)(void*) = nullptr;
    int (*event_synchronize)(void*) = nullptr;
    int (*stream_wait_event)(cudaStream_t, void*, unsigned int) = nullptr;
    int (*stream_synchronize)(cudaStream_t) = nullptr;
    int (*stream_destroy)(cudaStream_t) = nullptr;
    int (*device_synchronize)() = nullptr;
};

// Loads it as a CUDA application has libcuda loaded before NCCL starts: RTLD_GLOBAL (so that the fake NCCL finds
// fakecuda_enqueue), through this library's DT_RPATH (which names the fake's directory first, so a real driver is
// never picked up), and checked to be the fake.
bool load_fake_cuda(FakeCuda& f, std::string& error) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
        error = std::string("dlopen(libcuda.so.1): ") + dlerror();
        return false;
    }
    f.enqueue = reinterpret_cast<decltype(f.enqueue)>(dlsym(lib, "fakecuda_enqueue"));
    f.set_capturing = reinterpret_cast<decltype(f.set_capturing)>(dlsym(lib, "fakecuda_set_capturing"));
    f.stats = reinterpret_cast<decltype(f.stats)>(dlsym(lib, "fakecuda_stats"));
    f.stream_records = reinterpret_cast<decltype(f.stream_records)>(dlsym(lib, "fakecuda_stream_records"));
    f.last_capture = reinterpret_cast<decltype(f.last_capture)>(dlsym(lib, "fakecuda_last_capture"));
    if (f.enqueue == nullptr || f.set_capturing == nullptr || f.stats == nullptr || f.stream_records == nullptr ||
        f.last_capture == nullptr) {
        error = "the libcuda.so.1 found is not the fake one (no fakecuda_* functions)";
        return false;
    }
    if (dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        error = std::string("dlopen(libcudart.so.13): ") + dlerror();
        return false;
    }
    f.graph_instantiate =
        reinterpret_cast<decltype(f.graph_instantiate)>(dlsym(RTLD_DEFAULT, "cudaGraphInstantiateWithFlags"));
    f.graph_launch = reinterpret_cast<decltype(f.graph_launch)>(dlsym(RTLD_DEFAULT, "cudaGraphLaunch"));
    if (f.graph_instantiate == nullptr || f.graph_launch == nullptr) {
        error = "no cudaGraphInstantiateWithFlags / cudaGraphLaunch in the process";
        return false;
    }
    auto find = [](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(RTLD_DEFAULT, name));
        return fn != nullptr;
    };
    if (!find(f.event_create, "cudaEventCreate") || !find(f.event_destroy, "cudaEventDestroy") ||
        !find(f.event_record, "cudaEventRecord") || !find(f.event_query, "cudaEventQuery") ||
        !find(f.event_synchronize, "cudaEventSynchronize") || !find(f.stream_wait_event, "cudaStreamWaitEvent") ||
        !find(f.stream_synchronize, "cudaStreamSynchronize") || !find(f.stream_destroy, "cudaStreamDestroy") ||
        !find(f.device_synchronize, "cudaDeviceSynchronize")) {
        error = "the CUDA runtime in the process lacks the event, stream or synchronisation calls";
        return false;
    }
    return true;
}

// NCCL's newer entry points (nccl_newer_api.h), found at run time as a framework built against a newer nccl.h finds
// them where it may run on an older NCCL: a direct call would not even load on one that lacks them. dlsym from here
// sees the process's global scope first (a preloaded shim's exports) and then this library's own libnccl.so.2.
struct NewerNccl {
    decltype(&ncclAllReduceConfig) all_reduce_config = nullptr;
    decltype(&ncclBroadcastConfig) broadcast_config = nullptr;
    decltype(&ncclCommWindowRegister) window_register = nullptr;  // 2.27: not in every NCCL this library loads on
    decltype(&ncclCommWindowDeregister) window_deregister = nullptr;
    decltype(&ncclPutSignal) put_signal = nullptr;
    decltype(&ncclWaitSignal) wait_signal = nullptr;
};

// --config-calls: the Config forms of the collectives the scenario issues. False (and `error`) when one is missing.
bool find_config_calls(NewerNccl& n, std::string& error) {
    n.all_reduce_config = reinterpret_cast<decltype(n.all_reduce_config)>(dlsym(RTLD_DEFAULT, "ncclAllReduceConfig"));
    n.broadcast_config = reinterpret_cast<decltype(n.broadcast_config)>(dlsym(RTLD_DEFAULT, "ncclBroadcastConfig"));
    if (n.all_reduce_config && n.broadcast_config) return true;
    int version = 0;
    ncclGetVersion(&version);
    error = "--config-calls: the process has no " +
            std::string(n.all_reduce_config ? "ncclBroadcastConfig" : "ncclAllReduceConfig") + " (NCCL " +
            std::to_string(version) + "; the Config forms came with 2.31)";
    return false;
}

// --one-sided: ncclPutSignal and ncclWaitSignal where the NCCL has them. The version is asked too: a preloaded shim
// exports every entry point it knows, so a symbol found proves nothing about the NCCL under it.
bool find_one_sided(NewerNccl& n) {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess || version < 22902) return false;
    auto find = [](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(RTLD_DEFAULT, name));
        return fn != nullptr;
    };
    if (find(n.window_register, "ncclCommWindowRegister") && find(n.window_deregister, "ncclCommWindowDeregister") &&
        find(n.put_signal, "ncclPutSignal") && find(n.wait_signal, "ncclWaitSignal"))
        return true;
    n.put_signal = nullptr;  // one_sided_step's sign that the calls are skipped
    return false;
}

// NCCL_COLLCONFIG_INITIALIZER of a program built against 2.31 (whose sizeof ends at the user tag): every int
// NCCL_CONFIG_UNDEF_INT and every pointer NULL but the forced algorithm selection, with the call's own tag.
nccl_abi::CollConfig coll_config(uint64_t user_tag) {
    nccl_abi::CollConfig c{};
    c.size = offsetof(nccl_abi::CollConfig, launch_completion_event);
    c.magic = nccl_abi::kApiMagic;
    c.version = 23102;
    c.min_ctas = c.max_ctas = c.nvls_ctas = c.cga_cluster_size = c.cta_policy = INT_MIN;
    c.force_alg_selection = 1;
    c.user_profiler_tag = user_tag;
    return c;
}

// Rank 0 creates the unique id and publishes it atomically (write a temporary file, then rename); the others poll.
bool exchange_id(int rank, int world, ncclUniqueId& id, std::string& error) {
    const char* path = std::getenv("FAKE_NCCL_ID_FILE");
    if (path == nullptr || *path == '\0') {
        if (world != 1) {
            error = "FAKE_NCCL_ID_FILE is not set (run under fake_launch)";
            return false;
        }
    }
    if (rank == 0) {
        if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
            error = std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
            return false;
        }
        if (path == nullptr || *path == '\0') return true;  // a lone rank keeps its id
        std::string tmp = std::string(path) + ".tmp." + std::to_string(getpid());
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            out.write(id.internal, sizeof id.internal);
            if (!out.flush()) {
                error = "cannot write " + tmp;
                return false;
            }
        }
        if (std::rename(tmp.c_str(), path) != 0) {
            error = "cannot rename " + tmp + " to " + path;
            return false;
        }
        return true;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
        std::ifstream in(path, std::ios::binary);
        if (in && in.read(id.internal, sizeof id.internal)) return true;
        if (std::chrono::steady_clock::now() > deadline) {
            error = std::string("no unique id in ") + path + " after 60 s";
            return false;
        }
        sleep_ms(10);
    }
}

// --own-handlers: a program's own SIGSEGV and SIGTERM handlers, installed before NCCL starts (so before the shim's):
// each notes its signal in the file, then lets the signal kill the process as it would have.
const char* g_own_file = nullptr;

void own_handler(int sig) {
    if (int fd = open(g_own_file, O_WRONLY | O_APPEND | O_CREAT, 0644); fd >= 0) {
        const char* name = sig == SIGSEGV ? "SIGSEGV\n" : "SIGTERM\n";
        ssize_t n = write(fd, name, strlen(name));
        (void)n;
        close(fd);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_own_handlers(const std::string& file) {
    g_own_file = strdup(file.c_str());
    signal(SIGSEGV, own_handler);
    signal(SIGTERM, own_handler);
}

std::atomic<bool> g_watchdog_stop{false};  // --async-watchdog-ms: set before the teardown

// --torch-timeout-ms: the collective in flight (its call's start, steady clock ns; 0: none), its number and count.
std::atomic<int64_t> g_coll_since_ns{0};
std::atomic<uint64_t> g_coll_seq{0};
std::atomic<size_t> g_coll_count{0};
std::atomic<bool> g_torch_dumping{false};  // the watchdog caught a timeout: torch's work queue is held from now

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

class Scenario {
public:
    Scenario(const Options& o, int rank, int world) : o_(o), rank_(rank), world_(world) {}

    int run() {
        ncclUniqueId id;
        std::string error;
        if (!o_.own_handlers.empty()) install_own_handlers(o_.own_handlers + "." + std::to_string(rank_));
        if (o_.fake_cuda && !load_fake_cuda(cuda_, error)) {
            std::fprintf(stderr, "fake-framework: rank %d: %s\n", rank_, error.c_str());
            return kUsageError;
        }
        if (o_.config_calls && !find_config_calls(newer_, error)) {
            std::fprintf(stderr, "fake-framework: rank %d: %s\n", rank_, error.c_str());
            return kUsageError;
        }
        if (!exchange_id(rank_, world_, id, error)) {
            std::fprintf(stderr, "fake-framework: rank %d: %s\n", rank_, error.c_str());
            return kUsageError;
        }
        if (rank_ == o_.init_late_rank && o_.init_late_ms > 0) sleep_ms(o_.init_late_ms);
        if (o_.nonblocking) {
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            config.blocking = 0;
            if (!check(ncclCommInitRankConfig(&world_comm_, world_, id, rank_, &config), "ncclCommInitRankConfig") ||
                !settle(world_comm_, "ncclCommInitRankConfig")) {
                return kNcclError;
            }
        } else if (!check(ncclCommInitRank(&world_comm_, world_, id, rank_), "ncclCommInitRank")) {
            return kNcclError;
        }
        // Init is collective, so every rank has read the id by now: remove the file, so that a job whose launcher
        // is killed leaves nothing behind.
        if (const char* path = std::getenv("FAKE_NCCL_ID_FILE"); rank_ == 0 && path != nullptr && *path != '\0') {
            std::remove(path);
        }
        if (o_.split) {
            if (!check(ncclCommSplit(world_comm_, rank_ % 2, rank_, &sub_comm_, nullptr), "ncclCommSplit") ||
                !settle_all("ncclCommSplit")) {
                return kNcclError;
            }
        }
        if (o_.swap_rank >= 0) {
            if (o_.split) {
                std::fprintf(stderr, "fake-framework: --swap-rank and --split both use the second communicator\n");
                return kUsageError;
            }
            if (!check(ncclCommSplit(world_comm_, 0, rank_, &sub_comm_, nullptr), "ncclCommSplit(B)") ||
                !settle(sub_comm_, "ncclCommSplit(B)")) {
                return kNcclError;
            }
        }
        if (o_.grid > 0) {
            if (world_ % o_.grid != 0) {
                std::fprintf(stderr, "fake-framework: --grid %d does not divide the world size %d\n", o_.grid, world_);
                return kUsageError;
            }
            // Split order is the same on every rank, as Megatron's: TP groups first, then DP groups.
            if (!check(ncclCommSplit(world_comm_, rank_ / o_.grid, rank_, &tp_comm_, nullptr), "ncclCommSplit(tp)") ||
                !check(ncclCommSplit(world_comm_, rank_ % o_.grid, rank_, &dp_comm_, nullptr), "ncclCommSplit(dp)") ||
                !settle(tp_comm_, "ncclCommSplit(tp)") || !settle(dp_comm_, "ncclCommSplit(dp)")) {
                return kNcclError;
            }
        }
        if (!many_comms()) return kNcclError;
        if (o_.one_sided && !open_window()) return kNcclError;
        if (o_.async_watchdog_ms > 0) start_async_watchdog();
        if (o_.torch_timeout_ms > 0) start_torch_timeout_watchdog();
        for (step_ = 0; step_ < o_.steps; ++step_) {
            if (!run_step()) return kNcclError;
        }
        step_ = -1;
        // --graph-step: one eager all_reduce after the loop (a metric, as a torch script that replays its step).
        if (o_.graph_step >= 0 && !all_reduce(main_comm(), o_.count, ncclFloat32)) return kNcclError;
        if (o_.hold_ms > 0) sleep_ms(o_.hold_ms);
        if (!o_.wait_gone.empty()) wait_gone();
        g_watchdog_stop.store(true);
        if (o_.torch_sync && !torch_sync_end()) return kUsageError;
        if (!teardown()) return kNcclError;
        if (o_.fake_cuda) print_fake_cuda();
        std::printf("rank %d done steps=%d\n", rank_, o_.steps);
        std::fflush(stdout);
        return 0;
    }

private:
    bool at(int rank, int step) const { return rank == rank_ && step == step_; }

    bool check(ncclResult_t r, const char* what) {
        if (r == ncclSuccess) return true;
        std::fprintf(stderr, "fake-framework: rank %d step %d: %s failed: %s (%s)\n", rank_, step_, what,
                     ncclGetErrorString(r), ncclGetLastError(world_comm_));
        return false;
    }

    // With --nonblocking, poll the communicator until the last operation settles, as PyTorch does.
    bool settle(ncclComm_t comm, const char* what) {
        if (!o_.nonblocking || comm == nullptr) return true;
        ncclResult_t state = ncclInProgress;
        do {
            if (!check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError")) return false;
        } while (state == ncclInProgress);
        return check(state, what);
    }

    bool settle_all(const char* what) {
        return settle(world_comm_, what) && settle(sub_comm_, what) && settle(tp_comm_, what) && settle(dp_comm_, what);
    }

    // With --fake-cuda each communicator has a stream handle of its own (the fake libcuda takes any value); without,
    // the legacy default stream.
    cudaStream_t stream(ncclComm_t comm) const {
        if (!o_.fake_cuda || comm == nullptr) return nullptr;
        int k = comm == world_comm_ ? 0 : comm == sub_comm_ ? 1 : comm == tp_comm_ ? 2 : 3;
        return reinterpret_cast<cudaStream_t>(uintptr_t{0x5a0000} + uintptr_t(k) * 0x1000);
    }

    void print_fake_cuda() {
        FakeCudaStats st{};
        cuda_.stats(&st);
        uint64_t main_capturing = 0;
        uint64_t main_records = cuda_.stream_records(stream(world_comm_), &main_capturing);
        std::printf(
            "fake-cuda rank %d: event_records=%llu records_while_capturing=%llu main_stream_records=%llu "
            "main_stream_records_while_capturing=%llu event_queries=%llu capture_violations=%llu "
            "capture_checks_active=%llu events_created=%llu enqueued=%llu captured=%llu streams=%llu "
            "proc_address_found=%llu runtime_records=%llu stream_waits=%llu synchronizes=%llu sync_timeouts=%llu\n",
            rank_, (unsigned long long)st.event_records, (unsigned long long)st.records_while_capturing,
            (unsigned long long)main_records, (unsigned long long)main_capturing, (unsigned long long)st.event_queries,
            (unsigned long long)st.capture_violations, (unsigned long long)st.capture_checks_active,
            (unsigned long long)st.events_created, (unsigned long long)st.enqueued, (unsigned long long)st.captured,
            (unsigned long long)st.streams, (unsigned long long)st.proc_address_found,
            (unsigned long long)st.runtime_records, (unsigned long long)st.stream_waits,
            (unsigned long long)st.synchronizes, (unsigned long long)st.sync_timeouts);
        std::fflush(stdout);
    }

    // --async-watchdog-ms: PyTorch's watchdog thread, which polls each communicator's asynchronous error (a peer
    // gone, a remote abort) while the main thread may be blocked in a collective, and aborts the communicator on one.
    // It stops before the teardown (g_watchdog_stop), or with the process.
    void start_async_watchdog() {
        std::thread([comm = world_comm_, rank = rank_, ms = o_.async_watchdog_ms] {
            for (;;) {
                sleep_ms(ms);
                if (g_watchdog_stop.load()) return;
                ncclResult_t e = ncclSuccess;
                if (ncclCommGetAsyncError(comm, &e) != ncclSuccess) return;  // destroyed meanwhile
                if (e == ncclSuccess || e == ncclInProgress) continue;
                std::fprintf(stderr, "fake-framework: rank %d: watchdog: async error %s: aborting the communicator\n",
                             rank, ncclGetErrorString(e));
                ncclCommAbort(comm);
                return;
            }
        }).detach();
    }

    // --torch-timeout-ms: PyTorch's watchdog thread ("pt_nccl_watchdg") on a collective that outlives the process
    // group's timeout: it logs the timeout, aborts the communicators where TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (the
    // default, 3, does not), waits for the Flight Recorder's dump (--torch-dump-ms), then rethrows out of the thread:
    // std::terminate, SIGABRT raised in that thread.
    void start_torch_timeout_watchdog() {
        std::thread([this] {
            pthread_setname_np(pthread_self(), "pt_nccl_watchdg");
            for (;;) {
                sleep_ms(20);
                if (g_watchdog_stop.load()) return;
                const int64_t since = g_coll_since_ns.load();
                const int64_t ran_ms = since ? (steady_ns() - since) / 1000000 : 0;
                if (!since || ran_ms <= o_.torch_timeout_ms) continue;
                std::fprintf(
                    stderr,
                    "[rank%d]:[E] [PG ID 0 PG GUID 0(default_pg) Rank %d] Watchdog caught collective operation "
                    "timeout: WorkNCCL(SeqNum=%llu, OpType=ALLREDUCE, NumelIn=%zu, NumelOut=%zu, "
                    "Timeout(ms)=%d) ran for %lld milliseconds before timing out.\n",
                    rank_, rank_, (unsigned long long)g_coll_seq.load(), g_coll_count.load(), g_coll_count.load(),
                    o_.torch_timeout_ms, (long long)ran_ms);
                g_torch_dumping.store(true);
                const char* mode = std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
                if (mode && std::string(mode) == "1") ncclCommAbort(world_comm_);
                sleep_ms(o_.torch_dump_ms);
                std::fprintf(stderr,
                             "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG "
                             "ID 0 PG GUID 0(default_pg) Rank %d] Process group watchdog thread terminated with "
                             "exception: Watchdog caught collective operation timeout\n",
                             rank_);
                std::fflush(stderr);
                std::abort();
            }
        }).detach();
    }

    // --wait-gone: a test lets the job end once it has seen what it waits for.
    void wait_gone() {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (access(o_.wait_gone.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < deadline) sleep_ms(10);
    }

    // --cuda-hold-step: the GPU is stuck in "compute" before this step's collectives, until the test removes the file.
    bool hold_gpu() {
        const char* path = std::getenv("FAKE_CUDA_HOLD_FILE");
        if (path == nullptr || *path == '\0') {
            std::fprintf(stderr, "fake-framework: rank %d: --cuda-hold-step needs FAKE_CUDA_HOLD_FILE\n", rank_);
            return false;
        }
        if (std::FILE* f = std::fopen(path, "w")) {
            std::fclose(f);
        } else {
            std::fprintf(stderr, "fake-framework: rank %d: cannot create %s\n", rank_, path);
            return false;
        }
        cuda_.enqueue(stream(main_comm()));
        return true;
    }

    // Device-like addresses: the fake library never dereferences buffers, and nor may a shim.
    void* buf(int which) const {
        return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(rank_) * 0x100000000 +
                                       uintptr_t(which) * 0x10000000);
    }

    bool broadcast(int root) {
        if (o_.bcast_legacy) {  // no Config form: plain under --config-calls too
            return check(ncclBcast(buf(0), o_.count, ncclFloat32, root, world_comm_, stream(world_comm_)),
                         "ncclBcast") &&
                   settle(world_comm_, "ncclBcast");
        }
        return broadcast_on(world_comm_, root, buf(0)) && settle(world_comm_, "ncclBroadcast");
    }

    // ncclBroadcast from buf(0) into `recv`, or its Config form (--config-calls).
    bool broadcast_on(ncclComm_t comm, int root, void* recv) {
        if (!o_.config_calls)
            return check(ncclBroadcast(buf(0), recv, o_.count, ncclFloat32, root, comm, stream(comm)), "ncclBroadcast");
        const nccl_abi::CollConfig config = coll_config(++config_tags_);
        return check(newer_.broadcast_config(buf(0), recv, o_.count, ncclFloat32, root, comm, stream(comm),
                                             reinterpret_cast<const ncw_coll_config_t*>(&config)),
                     "ncclBroadcastConfig");
    }

    // --one-sided: the window the previous rank puts into, registered once (collective: every rank registers).
    bool open_window() {
        if (!find_one_sided(newer_)) {
            std::fprintf(stderr,
                         "fake-framework: rank %d: --one-sided: this NCCL has no ncclPutSignal/ncclWaitSignal "
                         "(2.29 or later): skipped\n",
                         rank_);
            return true;
        }
        return check(newer_.window_register(world_comm_, buf(1), o_.count * sizeof(float), &window_, 0),
                     "ncclCommWindowRegister");
    }

    // --one-sided: a signal put into rank + 1's window, and a wait for rank - 1's.
    bool one_sided_step() {
        if (!newer_.put_signal) return true;
        const int next = (rank_ + 1) % world_, prev = (rank_ + world_ - 1) % world_;
        nccl_abi::WaitSignalDesc wait{1, prev, 0, 0};
        return check(newer_.put_signal(buf(0), o_.count, ncclFloat32, next, window_, 0, 0, 0, 0, world_comm_,
                                       stream(world_comm_)),
                     "ncclPutSignal") &&
               check(newer_.wait_signal(1, reinterpret_cast<ncw_wait_signal_desc_t*>(&wait), world_comm_,
                                        stream(world_comm_)),
                     "ncclWaitSignal") &&
               settle(world_comm_, "one-sided");
    }

    // The communicator of the step's main collective: the world, the tensor-parallel group with --grid, or the last
    // of --churn-comms / --alive-comms.
    ncclComm_t main_comm() const {
        if (many_.empty()) return o_.grid > 0 ? tp_comm_ : world_comm_;
        return steps_comm_ ? steps_comm_ : many_.back();
    }

    // --churn-comms / --alive-comms: every rank splits in the same order, as frameworks building groups do.
    bool many_comms() {
        const int n = o_.churn_comms > 0 ? o_.churn_comms : o_.alive_comms;
        for (int i = 0; i < n; ++i) {
            ncclComm_t c = nullptr;
            if (!check(ncclCommSplit(world_comm_, 0, rank_, &c, nullptr), "ncclCommSplit(many)") ||
                !settle(c, "ncclCommSplit(many)"))
                return false;
            const int steps_at = o_.steps_comm > 0 && o_.steps_comm <= n ? o_.steps_comm - 1 : n - 1;
            if (i == steps_at) {  // the steps' communicator: its first all_reduce is the steps' own
                many_.push_back(c);
                steps_comm_ = c;
                if (i == n - 1) break;
                continue;
            }
            if (!all_reduce(c, o_.count, ncclFloat32) || !settle(c, "ncclAllReduce(many)")) return false;
            if (o_.churn_comms > 0) {
                if (!check(ncclCommDestroy(c), "ncclCommDestroy(many)")) return false;
                if (o_.memory_every > 0 && (i + 1) % o_.memory_every == 0) print_memory(i + 1);
            } else {
                many_.push_back(c);
            }
        }
        return true;
    }

    // --memory-every: the process's own peak and current resident memory (its /proc status: no launcher's or
    // wrapper's memory in it), so that a test can tell what each communicator made and destroyed costs.
    void print_memory(int churned) const {
        std::ifstream status("/proc/self/status");
        long hwm = -1, rss = -1;
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("VmHWM:", 0) == 0) hwm = std::atol(line.c_str() + 6);
            if (line.rfind("VmRSS:", 0) == 0) rss = std::atol(line.c_str() + 6);
        }
        std::printf("rank %d churned=%d vm_hwm_kb=%ld vm_rss_kb=%ld\n", rank_, churned, hwm, rss);
        std::fflush(stdout);
    }

    bool all_reduce(ncclComm_t comm, size_t count, ncclDataType_t dtype) {
        // --torch-timeout-ms: timed from the call's start, as torch times its work from its creation.
        g_coll_count.store(count);
        g_coll_seq.fetch_add(1);
        g_coll_since_ns.store(steady_ns());
        bool ok;
        if (o_.config_calls) {
            const nccl_abi::CollConfig config = coll_config(++config_tags_);
            ok = check(newer_.all_reduce_config(buf(0), buf(1), count, dtype, ncclSum, comm, stream(comm),
                                                reinterpret_cast<const ncw_coll_config_t*>(&config)),
                       "ncclAllReduceConfig");
        } else {
            ok = check(ncclAllReduce(buf(0), buf(1), count, dtype, ncclSum, comm, stream(comm)), "ncclAllReduce");
        }
        g_coll_since_ns.store(0);
        // torch enqueues the work after the launch, under the lock its watchdog holds while it waits for the Flight
        // Recorder's dump: the next collective's call returns, and the thread waits there for the abort.
        while (g_torch_dumping.load()) sleep_ms(10);
        return ok;
    }

    // --graph-step: the step's all_reduce, captured into a CUDA graph once (at that step, as torch.cuda.graph does)
    // and launched at that step and every later one, but by --graph-skip-rank at --graph-skip-step.
    bool graph_collective() {
        cudaStream_t s = stream(main_comm());
        if (step_ == o_.graph_step) {
            cuda_.set_capturing(s, 1);
            const bool ok = all_reduce(main_comm(), o_.count, ncclFloat32);
            cuda_.set_capturing(s, 0);
            if (!ok || cuda_.graph_instantiate(&graph_exec_, cuda_.last_capture(s), 0) != 0) {
                std::fprintf(stderr, "fake-framework: rank %d: the graph capture failed\n", rank_);
                return false;
            }
        }
        if (at(o_.graph_skip_rank, o_.graph_skip_step)) {
            std::fprintf(stderr, "fake-framework: rank %d: skipping the graph launch of step %d\n", rank_, step_);
            return true;
        }
        if (cuda_.graph_launch(graph_exec_, s) == 0) return true;
        std::fprintf(stderr, "fake-framework: rank %d step %d: cudaGraphLaunch failed\n", rank_, step_);
        return false;
    }

    // The step's main collective on the world communicator, as this rank issues it.
    bool main_collective() {
        if (o_.graph_step >= 0 && step_ >= o_.graph_step) return graph_collective();
        if (at(o_.skip_rank, o_.skip_step)) return true;
        if (at(o_.mismatch_rank, o_.mismatch_step)) {
            switch (o_.mismatch_kind) {
                case MismatchKind::Count: return all_reduce(main_comm(), o_.count / 2, ncclFloat32);
                case MismatchKind::Dtype: return all_reduce(main_comm(), o_.count, ncclFloat16);
                case MismatchKind::Op: return broadcast_on(main_comm(), 0, buf(1));
                case MismatchKind::Root:
                case MismatchKind::None: break;  // root mismatches happen in the broadcast
            }
        }
        for (int i = 0; i < o_.coll_per_step; ++i)
            if (!all_reduce(main_comm(), o_.count, ncclFloat32)) return false;
        if (at(o_.extra_rank, o_.extra_step)) return all_reduce(main_comm(), o_.count, ncclFloat32);
        return true;
    }

    // torch's compute stream (--torch-sync): a handle of no communicator.
    static cudaStream_t compute_stream() { return reinterpret_cast<cudaStream_t>(uintptr_t{0x5b0000}); }

    bool cuda_ok(int r, const char* what) {
        if (r == 0) return true;
        std::fprintf(stderr, "fake-framework: rank %d step %d: %s failed: %d\n", rank_, step_, what, r);
        return false;
    }

    // --torch-sync: waits for the step's collectives as torch does (--sync-how), through the CUDA runtime the
    // program finds (the shim's, preloaded). One event per collective stream, made once.
    bool torch_sync() {
        if (o_.sync_how == SyncHow::Device) return cuda_ok(cuda_.device_synchronize(), "cudaDeviceSynchronize");
        if (o_.sync_how == SyncHow::Unrelated)
            return cuda_ok(cuda_.stream_synchronize(compute_stream()), "cudaStreamSynchronize");
        std::vector<cudaStream_t> streams;
        for (ncclComm_t c : {main_comm(), world_comm_, sub_comm_, tp_comm_, dp_comm_}) {
            if (c == nullptr) continue;
            const cudaStream_t s = stream(c);
            if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
        }
        for (size_t i = 0; i < streams.size(); ++i) {
            if (sync_events_.size() <= i) {
                void* ev = nullptr;
                if (!cuda_ok(cuda_.event_create(&ev), "cudaEventCreate")) return false;
                sync_events_.push_back(ev);
            }
            void* ev = sync_events_[i];
            if (!cuda_ok(cuda_.event_record(ev, streams[i]), "cudaEventRecord")) return false;
            switch (o_.sync_how) {
                case SyncHow::Stream:
                    if (!cuda_ok(cuda_.stream_wait_event(compute_stream(), ev, 0), "cudaStreamWaitEvent")) return false;
                    break;
                case SyncHow::Event:
                    if (!cuda_ok(cuda_.event_synchronize(ev), "cudaEventSynchronize")) return false;
                    break;
                case SyncHow::Query: {
                    int r;
                    while ((r = cuda_.event_query(ev)) == 600) sleep_ms(1);  // cudaErrorNotReady
                    if (!cuda_ok(r, "cudaEventQuery")) return false;
                    break;
                }
                case SyncHow::Device:
                case SyncHow::Unrelated: break;
            }
        }
        return o_.sync_how != SyncHow::Stream ||
               cuda_ok(cuda_.stream_synchronize(compute_stream()), "cudaStreamSynchronize");
    }

    // Before the teardown: the events and the compute stream go, as torch's do.
    bool torch_sync_end() {
        for (void* ev : sync_events_)
            if (!cuda_ok(cuda_.event_destroy(ev), "cudaEventDestroy")) return false;
        sync_events_.clear();
        return cuda_ok(cuda_.stream_destroy(compute_stream()), "cudaStreamDestroy");
    }

    // Not while the main stream is under graph capture (--capture-step: it ends with the last captured step), where a
    // synchronisation is illegal.
    bool run_step() {
        if (!step_ops()) return false;
        const bool capturing =
            o_.capture_step >= 0 && step_ >= o_.capture_step && step_ < o_.capture_step + o_.capture_count - 1;
        return !o_.torch_sync || capturing || torch_sync();
    }

    bool step_ops() {
        if (at(o_.die_rank, o_.die_step)) {
            std::fflush(nullptr);
            kill(getpid(), SIGKILL);
        }
        if (at(o_.exit_rank, o_.exit_step)) {
            std::fflush(nullptr);
            if (o_.exit_how == "_exit") _exit(o_.exit_code);
            if (o_.exit_how == "segv") *static_cast<volatile int*>(nullptr) = 1;
            if (o_.exit_how == "abort") std::abort();
            std::exit(o_.exit_code);
        }
        if (o_.pipeline) return pipeline_step();
        if (o_.a2a && !all_to_all()) return false;
        if (o_.swap_pair && !swap_pair()) return false;
        if (o_.ring && !ring_exchange()) return false;
        if (at(o_.sleep_rank, o_.sleep_step)) sleep_ms(o_.sleep_ms);
        if (step_ == o_.pause_step) sleep_ms(o_.pause_ms);
        if (rank_ == o_.late_rank && o_.late_ms > 0) sleep_ms(o_.late_ms);
        if (o_.step_ms > 0) sleep_ms(o_.step_ms);
        if (step_ == o_.cuda_hold_step && !hold_gpu()) return false;
        if (step_ == o_.capture_step) cuda_.set_capturing(stream(main_comm()), 1);

        if (o_.group && !check(ncclGroupStart(), "ncclGroupStart")) return false;
        const bool swapped = at(o_.swap_rank, o_.swap_step);
        if (swapped) std::fprintf(stderr, "fake-framework: rank %d: B before A at step %d\n", rank_, step_);
        if (swapped && !all_reduce(sub_comm_, o_.count, ncclFloat32)) return false;
        if (!main_collective()) return false;
        if (o_.swap_rank >= 0 && !swapped && !all_reduce(sub_comm_, o_.count, ncclFloat32)) return false;
        if (o_.group) {
            int next = (rank_ + 1) % world_;
            int prev = (rank_ + world_ - 1) % world_;
            if (!check(ncclSend(buf(2), o_.count, ncclFloat32, next, world_comm_, stream(world_comm_)), "ncclSend") ||
                !check(ncclRecv(buf(3), o_.count, ncclFloat32, prev, world_comm_, stream(world_comm_)), "ncclRecv")) {
                return false;
            }
        }
        for (int i = 0; o_.split && i < o_.coll_per_step; ++i)
            if (!all_reduce(sub_comm_, o_.count, ncclFloat32)) return false;
        if (o_.grid > 0 && !all_reduce(dp_comm_, o_.count, ncclFloat32)) return false;
        if (o_.group && !check(ncclGroupEnd(), "ncclGroupEnd")) return false;
        if (!settle_all("step")) return false;
        if (o_.one_sided && !one_sided_step()) return false;

        bool root_mismatch = o_.mismatch_kind == MismatchKind::Root && step_ == o_.mismatch_step;
        if ((o_.bcast_every > 0 && step_ % o_.bcast_every == 0) || root_mismatch) {
            int root = root_mismatch && rank_ == o_.mismatch_rank ? 1 % world_ : 0;
            if (!broadcast(root)) return false;
        }
        if (o_.capture_step >= 0 && step_ == o_.capture_step + o_.capture_count - 1) {
            sleep_ms(o_.capture_ms);
            cuda_.set_capturing(stream(main_comm()), 0);
        }
        return true;
    }

    // --a2a: the rows rank `from` sends rank `to` at this step, 1 to 16, alike on every rank (an MoE router's split
    // table, exchanged before the all-to-all).
    size_t a2a_rows(int from, int to) const {
        uint64_t h = 1469598103934665603ull;
        for (uint64_t v : {uint64_t(step_), uint64_t(from), uint64_t(to)}) h = (h ^ v) * 1099511628211ull;
        return 1 + (h >> 17) % 16;
    }

    // --a2a: all_to_all_single with uneven splits, as torch issues it: one group of a send to and a receive from every
    // other rank, on the world communicator. --a2a-stale-rank's table is stale at its step: it sends rank 0 twice the
    // rows rank 0 expects from it.
    bool all_to_all() {
        constexpr size_t kRow = 256;  // float32 elements per row
        ncclComm_t w = world_comm_;
        if (!check(ncclGroupStart(), "ncclGroupStart")) return false;
        for (int peer = 0; peer < world_; ++peer) {
            if (peer == rank_) continue;
            size_t rows = a2a_rows(rank_, peer);
            if (peer == 0 && at(o_.a2a_stale_rank, o_.a2a_stale_step)) {
                std::fprintf(stderr, "fake-framework: rank %d: a stale split table at step %d\n", rank_, step_);
                rows *= 2;
            }
            if (!check(ncclSend(buf(2), rows * kRow, ncclFloat32, peer, w, stream(w)), "ncclSend") ||
                !check(ncclRecv(buf(3), a2a_rows(peer, rank_) * kRow, ncclFloat32, peer, w, stream(w)), "ncclRecv"))
                return false;
        }
        return check(ncclGroupEnd(), "ncclGroupEnd") && settle(w, "all_to_all");
    }

    // --swap-pair: ranks 0 and 1 swap a tensor, rank 0 sending first and rank 1 receiving first; at
    // --swap-deadlock-step both send first.
    bool swap_pair() {
        if (rank_ > 1 || world_ < 2) return true;
        ncclComm_t w = world_comm_;
        const int peer = 1 - rank_;
        auto send = [&] { return check(ncclSend(buf(2), o_.count, ncclFloat32, peer, w, stream(w)), "ncclSend"); };
        auto recv = [&] { return check(ncclRecv(buf(3), o_.count, ncclFloat32, peer, w, stream(w)), "ncclRecv"); };
        const bool send_first = rank_ == 0 || step_ == o_.swap_deadlock_step;
        if (step_ == o_.swap_deadlock_step && rank_ == 1)
            std::fprintf(stderr, "fake-framework: rank 1: sends first at step %d\n", step_);
        return (send_first ? send() && recv() : recv() && send()) && settle(w, "swap");
    }

    // --ring: batch_isend_irecv with the ring neighbours, one group; --ring-skip-recv-rank leaves its receive out.
    bool ring_exchange() {
        ncclComm_t w = world_comm_;
        const int next = (rank_ + 1) % world_, prev = (rank_ + world_ - 1) % world_;
        const bool skip = at(o_.ring_skip_recv_rank, o_.ring_skip_recv_step);
        if (skip)
            std::fprintf(stderr, "fake-framework: rank %d: no receive from rank %d at step %d\n", rank_, prev, step_);
        return check(ncclGroupStart(), "ncclGroupStart") &&
               check(ncclSend(buf(2), o_.count, ncclFloat32, next, w, stream(w)), "ncclSend") &&
               (skip || check(ncclRecv(buf(3), o_.count, ncclFloat32, prev, w, stream(w)), "ncclRecv")) &&
               check(ncclGroupEnd(), "ncclGroupEnd") && settle(w, "ring");
    }

    // One pipeline stage's step on the world communicator, each send and receive on its own (as torch's dist.send and
    // dist.recv): forward from rank - 1 to rank + 1, then the gradients back.
    bool pipeline_step() {
        ncclComm_t w = world_comm_;
        auto send = [&](int peer) {
            return check(ncclSend(buf(2), o_.count, ncclFloat32, peer, w, stream(w)), "ncclSend");
        };
        auto recv = [&](int peer) {
            return check(ncclRecv(buf(3), o_.count, ncclFloat32, peer, w, stream(w)), "ncclRecv");
        };
        if (rank_ > 0 && !recv(rank_ - 1)) return false;
        if (at(o_.sleep_rank, o_.sleep_step)) sleep_ms(o_.sleep_ms);        // away before this step's send
        if (rank_ == o_.late_rank && o_.late_ms > 0) sleep_ms(o_.late_ms);  // a slow stage: its compute, every step
        // --wrong-peer-rank: a wrong peer index (its send to rank 0 waits for a receive never posted).
        const int next = at(o_.wrong_peer_rank, o_.wrong_peer_step) ? 0 : rank_ + 1;
        if (rank_ < world_ - 1 && (!send(next) || !recv(rank_ + 1))) return false;
        if (rank_ > 0 && !send(rank_ - 1)) return false;
        return settle_all("step");
    }

    bool teardown() {
        if (window_ != nullptr && o_.teardown != Teardown::None &&
            !check(newer_.window_deregister(world_comm_, window_), "ncclCommWindowDeregister"))
            return false;
        std::vector<ncclComm_t> comms(many_.rbegin(), many_.rend());
        for (ncclComm_t c : {dp_comm_, tp_comm_, sub_comm_, world_comm_}) comms.push_back(c);
        for (ncclComm_t comm : comms) {
            if (comm == nullptr) continue;
            switch (o_.teardown) {
                case Teardown::Finalize:
                    if (!check(ncclCommFinalize(comm), "ncclCommFinalize")) return false;
                    [[fallthrough]];
                case Teardown::Destroy:
                    if (!check(ncclCommDestroy(comm), "ncclCommDestroy")) return false;
                    break;
                case Teardown::Abort:
                    if (!check(ncclCommAbort(comm), "ncclCommAbort")) return false;
                    break;
                case Teardown::None: break;
            }
        }
        return true;
    }

    const Options& o_;
    FakeCuda cuda_;
    NewerNccl newer_;                 // --config-calls, --one-sided
    uint64_t config_tags_ = 0;        // --config-calls: the Config calls made, each call's tag its number
    ncclWindow_t window_ = nullptr;   // --one-sided
    void* graph_exec_ = nullptr;      // --graph-step: the instantiated graph of the captured all_reduce
    std::vector<void*> sync_events_;  // --torch-sync: one per collective stream
    int rank_;
    int world_;
    int step_ = -1;
    ncclComm_t world_comm_ = nullptr;
    ncclComm_t sub_comm_ = nullptr;
    ncclComm_t tp_comm_ = nullptr;
    ncclComm_t dp_comm_ = nullptr;
    ncclComm_t steps_comm_ = nullptr;  // --steps-comm (else the last of many_)
    std::vector<ncclComm_t> many_;     // --churn-comms (the last one) / --alive-comms
};

}  // namespace
}  // namespace ncw::fw

namespace {
volatile sig_atomic_t g_term_seen = 0;  // --absorb-term
}  // namespace

extern "C" __attribute__((visibility("default"))) int fw_run(int argc, char** argv) {
    using namespace ncw::fw;
    Options options;
    std::string error;
    if (!parse_options(argc, argv, options, error)) {
        std::fprintf(stderr, "fake-framework: %s\n%s", error.c_str(), usage_text());
        return kUsageError;
    }
    int rank = env_int("RANK", 0);
    int world = env_int("WORLD_SIZE", 1);
    if (world < 1 || rank < 0 || rank >= world) {
        std::fprintf(stderr, "fake-framework: bad RANK=%d / WORLD_SIZE=%d\n", rank, world);
        return kUsageError;
    }
    if (options.absorb_term) {
        struct sigaction sa {};
        sa.sa_handler = [](int) { g_term_seen = 1; };
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(SIGTERM, &sa, nullptr);
    }
    if (options.no_init_rank == rank) {
        sleep_ms(options.hold_ms);
        return 0;
    }
    if (options.never_nccl) {
        std::printf("rank %d done steps=0\n", rank);
        std::fflush(stdout);
        return 0;
    }
    return Scenario(options, rank, world).run();
}

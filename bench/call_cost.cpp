// CPU cost of one intercepted call: a tight loop of ncclAllReduce (8 bytes) on a 1-rank communicator, timed in
// batches; run it with and without LD_PRELOAD=libncclwatch.so and compare the medians.
//   call_cost [--cuda] [--batches N] [--calls N] [--group G]
// --group G: what nccl-tests' `all_reduce_perf -g G` does per iteration, ncclGroupStart, one ncclAllReduce on each of
// G communicators (ncclCommInitAll over devices 0..G-1, a stream each), ncclGroupEnd; the time is per group.
// --cuda: a real NCCL on a GPU (libcudart.so.13 opened at run time for the stream and the buffer); the GPU work is
// synchronised after every batch so the queue never fills. Without it: the fake NCCL on CPU, buffers unused.
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Cudart {
    int (*malloc_fn)(void**, size_t) = nullptr;
    int (*stream_create)(cudaStream_t*) = nullptr;
    int (*stream_sync)(cudaStream_t) = nullptr;
    int (*set_device)(int) = nullptr;
};

bool load_cudart(Cudart& c) {
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return false;
    c.malloc_fn = reinterpret_cast<int (*)(void**, size_t)>(dlsym(h, "cudaMalloc"));
    c.stream_create = reinterpret_cast<int (*)(cudaStream_t*)>(dlsym(h, "cudaStreamCreate"));
    c.stream_sync = reinterpret_cast<int (*)(cudaStream_t)>(dlsym(h, "cudaStreamSynchronize"));
    c.set_device = reinterpret_cast<int (*)(int)>(dlsym(h, "cudaSetDevice"));
    return c.malloc_fn && c.stream_create && c.stream_sync && c.set_device;
}

}  // namespace

int main(int argc, char** argv) {
    bool cuda = false;
    int batches = 60, calls = 2000, group = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--cuda"))
            cuda = true;
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
            batches = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = atoi(argv[++i]);
    }
    const int ncomms = group > 0 ? group : 1;
    Cudart cu;
    std::vector<cudaStream_t> streams(static_cast<size_t>(ncomms), nullptr);
    std::vector<void*> bufs(static_cast<size_t>(ncomms), reinterpret_cast<void*>(0x1000));
    if (cuda) {
        if (!load_cudart(cu)) {
            fprintf(stderr, "call_cost: CUDA unavailable\n");
            return 2;
        }
        for (int d = 0; d < ncomms; ++d)
            if (cu.set_device(d) != 0 || cu.stream_create(&streams[size_t(d)]) != 0 ||
                cu.malloc_fn(&bufs[size_t(d)], 64) != 0) {
                fprintf(stderr, "call_cost: CUDA device %d unavailable\n", d);
                return 2;
            }
        cu.set_device(0);
    } else {
        for (int d = 0; d < ncomms; ++d) streams[size_t(d)] = reinterpret_cast<cudaStream_t>(uintptr_t(0x5000 + d));
    }
    std::vector<ncclComm_t> comms(static_cast<size_t>(ncomms));
    int version = 0;
    ncclGetVersion(&version);
    if (group > 0) {
        std::vector<int> devs(static_cast<size_t>(ncomms));
        for (int d = 0; d < ncomms; ++d) devs[size_t(d)] = d;
        if (ncclCommInitAll(comms.data(), ncomms, devs.data()) != ncclSuccess) {
            fprintf(stderr, "call_cost: ncclCommInitAll failed\n");
            return 2;
        }
    } else {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comms[0], 1, id, 0) != ncclSuccess) {
            fprintf(stderr, "call_cost: communicator init failed\n");
            return 2;
        }
    }
    auto one = [&] {
        if (group > 0) {
            ncclGroupStart();
            for (int d = 0; d < ncomms; ++d)
                ncclAllReduce(bufs[size_t(d)], bufs[size_t(d)], 2, ncclFloat32, ncclSum, comms[size_t(d)],
                              streams[size_t(d)]);
            ncclGroupEnd();
        } else {
            ncclAllReduce(bufs[0], bufs[0], 2, ncclFloat32, ncclSum, comms[0], streams[0]);
        }
    };
    auto sync = [&] {
        if (!cuda) return;
        for (int d = 0; d < ncomms; ++d) cu.stream_sync(streams[size_t(d)]);
    };
    // Warm up for half a second: caches, the resolver, and the shim's clock anchor (its watchdog publishes one after
    // its first polls).
    for (auto end = Clock::now() + std::chrono::milliseconds(500); Clock::now() < end;) {
        for (int i = 0; i < 100; ++i) one();
        sync();
    }
    std::vector<double> per_call;
    for (int b = 0; b < batches + 5; ++b) {
        auto t0 = Clock::now();
        for (int i = 0; i < calls; ++i) one();
        auto t1 = Clock::now();
        sync();
        if (b >= 5) per_call.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);  // warm
    }
    std::sort(per_call.begin(), per_call.end());
    printf("nccl %d %s%s: median %.1f ns/call, p10 %.1f, p90 %.1f (%d batches of %d)\n", version, cuda ? "GPU" : "fake",
           group > 0 ? (" group of " + std::to_string(group)).c_str() : "", per_call[per_call.size() / 2],
           per_call[per_call.size() / 10], per_call[per_call.size() * 9 / 10], batches, calls);
    for (auto c : comms) ncclCommDestroy(c);
    return 0;
}

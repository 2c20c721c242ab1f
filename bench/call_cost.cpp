// CPU cost of one intercepted call: a tight loop of ncclAllReduce (8 bytes) on a 1-rank communicator, timed in
// batches; run it with and without LD_PRELOAD=libncclwatch.so and compare the medians.
//   call_cost [--cuda] [--batches N] [--calls N] [--group G]
// --group G: what nccl-tests' `all_reduce_perf -g G` does per iteration, ncclGroupStart, one ncclAllReduce on each of
// G communicators (ncclCommInitAll over devices 0..G-1, a stream each), ncclGroupEnd; the time is per group.
// --cuda: a real NCCL on a GPU (libcudart.so.13 opened at run time for the stream and the buffer); the GPU work is
// synchronised after every batch so the queue never fills. Without it: the fake NCCL on CPU, buffers unused.
// --ab: latency, in one process, through the shim and around it. all_reduce_perf's loop (ITERS iterations launched
// back to back, then every stream synchronised; the time per iteration), in blocks that alternate between NCCL's own
// entry points (dlopen of libnccl.so.2 with RTLD_NOLOAD) and the ones this process links to, which are the shim's
// under LD_PRELOAD. A run of all_reduce_perf lands in one of two modes microseconds apart at 8 B on the H200
// machines, either side; both arms here share one process, so its mode. Without LD_PRELOAD both arms are NCCL's:
// the method's own error (an A/A run).
//   call_cost --cuda --group 2 --ab [--rounds R] [--iters ITERS]
// --ab-cpu: the CPU per call, in one process, through the shim and around it: batches of CALLS calls (the GPU work
// synchronised after each, untimed) alternate, ABBA, between NCCL's own entry points and the linked ones. A process
// on the H200 hosts lands in one of two speed modes about 150 ns per call apart, whatever the build; both arms share
// the process's. Prints the linked arm's usual line, then the pairs' "abcpu" line.
//   call_cost --cuda --ab-cpu [--rounds R] [--calls CALLS]
// --nranks N --rank R --id-file PATH: one rank of an N-rank communicator, one process per rank (rank 0 writes the
// ncclUniqueId to PATH, the others wait for it; 30 s at most), on device --device (0): several ranks on one GPU,
// each its own NCCL host (NCCL_HOSTID), as test/gpu's one-GPU jobs. Every rank must be given the same options; the
// warm-ups count blocks instead of timing them, so that the ranks issue the same collectives (--warm-blocks, 50 of
// 100 calls: over sockets on one GPU an op takes 4.5 ms, so fewer there).
// --sweep MIN:MAX (with --cuda): after the rest, the in-place all_reduce of MIN, 4 MIN, ... MAX bytes (MAX included)
// through the linked entry points, --sweep-iters (5) each after 2 of warm-up; prints the time and the bus bandwidth
// per size (nccl-tests' all_reduce factor 2 (n - 1) / n). One line per size: "sweep ranks N bytes B us T busbw G".
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
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

// The three entry points the loop calls.
struct NcclFns {
    ncclResult_t (*group_start)() = ncclGroupStart;  // this process's binding: the shim's under LD_PRELOAD
    ncclResult_t (*group_end)() = ncclGroupEnd;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) = ncclAllReduce;
};

// NCCL's own definitions, whoever comes first in the lookup order.
bool load_real_nccl(NcclFns& f) {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return false;
    f.group_start = reinterpret_cast<decltype(f.group_start)>(dlsym(h, "ncclGroupStart"));
    f.group_end = reinterpret_cast<decltype(f.group_end)>(dlsym(h, "ncclGroupEnd"));
    f.all_reduce = reinterpret_cast<decltype(f.all_reduce)>(dlsym(h, "ncclAllReduce"));
    return f.group_start && f.group_end && f.all_reduce;
}

// The value num/den of the way up the sorted values (1/2: the median).
double quantile_of(std::vector<double> v, size_t num, size_t den) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, v.size() * num / den)];
}
double median_of(const std::vector<double>& v) { return quantile_of(v, 1, 2); }

// Rank 0 writes the id (a temporary file, then a rename); the others read it once it is there.
bool share_unique_id(ncclUniqueId& id, int rank, const std::string& path) {
    if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) return false;
        const std::string tmp = path + ".tmp";
        {
            std::ofstream f(tmp, std::ios::binary);
            f.write(id.internal, sizeof(id.internal));
            if (!f) return false;
        }
        return rename(tmp.c_str(), path.c_str()) == 0;
    }
    for (auto end = Clock::now() + std::chrono::seconds(30); Clock::now() < end;) {
        std::ifstream f(path, std::ios::binary);
        if (f && f.read(id.internal, sizeof(id.internal))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    bool cuda = false, ab = false, ab_cpu = false;
    int batches = 60, calls = 2000, group = 0, rounds = 60, iters = 1000;
    int nranks = 1, rank = 0, device = 0, sweep_iters = 5, warm_blocks = 50;
    size_t sweep_min = 0, sweep_max = 0;
    std::string id_file;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--cuda"))
            cuda = true;
        else if (!strcmp(argv[i], "--ab"))
            ab = true;
        else if (!strcmp(argv[i], "--ab-cpu"))
            ab_cpu = true;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
            batches = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nranks") && i + 1 < argc)
            nranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rank") && i + 1 < argc)
            rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--id-file") && i + 1 < argc)
            id_file = argv[++i];
        else if (!strcmp(argv[i], "--warm-blocks") && i + 1 < argc)
            warm_blocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sweep-iters") && i + 1 < argc)
            sweep_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sweep") && i + 1 < argc) {
            const char* a = argv[++i];
            sweep_min = strtoull(a, nullptr, 10);
            const char* c = strchr(a, ':');
            sweep_max = c ? strtoull(c + 1, nullptr, 10) : sweep_min;
        } else {
            fprintf(stderr, "call_cost: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    const bool multi = nranks > 1;
    if (multi && (group > 0 || id_file.empty() || rank < 0 || rank >= nranks)) {
        fprintf(stderr, "call_cost: --nranks needs --rank 0..N-1 and --id-file, and no --group\n");
        return 2;
    }
    const int ncomms = group > 0 ? group : 1;
    Cudart cu;
    std::vector<cudaStream_t> streams(static_cast<size_t>(ncomms), nullptr);
    std::vector<void*> bufs(static_cast<size_t>(ncomms), reinterpret_cast<void*>(0x1000));
    void* sweep_buf = nullptr;
    if (cuda && multi) {
        if (!load_cudart(cu) || cu.set_device(device) != 0 || cu.stream_create(&streams[0]) != 0 ||
            cu.malloc_fn(&bufs[0], 64) != 0 || (sweep_max && cu.malloc_fn(&sweep_buf, sweep_max) != 0)) {
            fprintf(stderr, "call_cost: CUDA device %d unavailable\n", device);
            return 2;
        }
    } else if (cuda) {
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
        if (sweep_max && cu.malloc_fn(&sweep_buf, sweep_max) != 0) {
            fprintf(stderr, "call_cost: no %zu bytes on device 0 for the sweep\n", sweep_max);
            return 2;
        }
    } else {
        for (int d = 0; d < ncomms; ++d) streams[size_t(d)] = reinterpret_cast<cudaStream_t>(uintptr_t(0x5000 + d));
    }
    std::vector<ncclComm_t> comms(static_cast<size_t>(ncomms));
    int version = 0;
    ncclGetVersion(&version);
    if (multi) {
        setvbuf(stdout, nullptr, _IOLBF, 0);  // each phase's line as it comes: a pair that hangs says where
        const auto t_init = Clock::now();
        ncclUniqueId id;
        if (!share_unique_id(id, rank, id_file) || ncclCommInitRank(&comms[0], nranks, id, rank) != ncclSuccess) {
            fprintf(stderr, "call_cost: rank %d of %d: communicator init failed\n", rank, nranks);
            return 2;
        }
        printf("init rank %d of %d: %.0f ms\n", rank, nranks,
               std::chrono::duration<double, std::milli>(Clock::now() - t_init).count());
    } else if (group > 0) {
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
    const NcclFns linked;
    auto one_via = [&](const NcclFns& f) {
        if (group > 0) {
            f.group_start();
            for (int d = 0; d < ncomms; ++d)
                f.all_reduce(bufs[size_t(d)], bufs[size_t(d)], 2, ncclFloat32, ncclSum, comms[size_t(d)],
                             streams[size_t(d)]);
            f.group_end();
        } else {
            f.all_reduce(bufs[0], bufs[0], 2, ncclFloat32, ncclSum, comms[0], streams[0]);
        }
    };
    auto one = [&] { one_via(linked); };
    auto sync = [&] {
        if (!cuda) return;
        for (int d = 0; d < ncomms; ++d) cu.stream_sync(streams[size_t(d)]);
    };
    if (ab) {
        NcclFns real;
        if (!load_real_nccl(real)) {
            fprintf(stderr, "call_cost: cannot find libnccl.so.2's own entry points\n");
            return 2;
        }
        const bool same = real.all_reduce == linked.all_reduce;
        // One block: ITERS iterations launched back to back, then the streams synchronised (all_reduce_perf's
        // timing); the time per iteration, and the launch's share of it (the rest is the GPU catching up).
        auto block = [&](const NcclFns& f, double& launch_us) {
            auto t0 = Clock::now();
            for (int i = 0; i < iters; ++i) one_via(f);
            auto t1 = Clock::now();
            sync();
            auto t2 = Clock::now();
            launch_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
            return std::chrono::duration<double, std::micro>(t2 - t0).count() / iters;
        };
        double l;
        if (multi) {  // as many blocks on every rank: each block's collectives meet the other ranks' ones
            for (int w = 0; w < 5; ++w) {
                block(real, l);
                block(linked, l);
            }
        } else {
            for (auto end = Clock::now() + std::chrono::milliseconds(500); Clock::now() < end;) {
                block(real, l);
                block(linked, l);
            }
        }
        std::vector<double> a, b, d, la, lb;
        for (int r = 0; r < rounds; ++r) {
            double ta, tb, lta, ltb;
            if (r % 2) {  // ABBA: a drift during the run cancels
                ta = block(real, lta);
                tb = block(linked, ltb);
            } else {
                tb = block(linked, ltb);
                ta = block(real, lta);
            }
            a.push_back(ta);
            b.push_back(tb);
            d.push_back(tb - ta);
            la.push_back(lta);
            lb.push_back(ltb);
        }
        std::vector<double> dl;
        for (size_t k = 0; k < la.size(); ++k) dl.push_back(lb[k] - la[k]);
        printf(
            "ab nccl %d %s%s%s, %s: NCCL's own %.3f us/iter (launch %.3f), linked %.3f us/iter (launch %.3f); "
            "added: median %.3f us, p10 %.3f, p90 %.3f (%d rounds of %d iterations); launch added: median %.3f us\n",
            version, cuda ? "GPU" : "fake", group > 0 ? (" group of " + std::to_string(group)).c_str() : "",
            multi ? (" ranks " + std::to_string(nranks)).c_str() : "", same ? "A/A (no shim)" : "linked = the shim",
            median_of(a), median_of(la), median_of(b), median_of(lb), median_of(d), quantile_of(d, 1, 10),
            quantile_of(d, 9, 10), rounds, iters, median_of(dl));
    }
    // The bus bandwidth through the linked entry points (the shim's under LD_PRELOAD), size by size.
    for (size_t bytes = sweep_min; sweep_buf && bytes > 0;) {
        const size_t count = bytes / 4;
        for (int w = 0; w < 2; ++w)
            linked.all_reduce(sweep_buf, sweep_buf, count, ncclFloat32, ncclSum, comms[0], streams[0]);
        sync();
        const auto t0 = Clock::now();
        for (int i = 0; i < sweep_iters; ++i)
            linked.all_reduce(sweep_buf, sweep_buf, count, ncclFloat32, ncclSum, comms[0], streams[0]);
        sync();
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / sweep_iters;
        const double factor = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 1.0;
        printf("sweep ranks %d bytes %zu us %.1f busbw %.3f\n", nranks, bytes, us, double(bytes) / us / 1e3 * factor);
        if (bytes >= sweep_max) break;
        bytes = std::min(sweep_max, bytes * 4);
    }
    if (ab || sweep_buf) {
        for (auto c : comms) ncclCommDestroy(c);
        return 0;
    }
    // Warm up for half a second: caches, the resolver, and the shim's clock anchor (its watchdog publishes one after
    // its first polls). Several ranks: as many calls on each (50 batches of 100).
    const auto warm_end = Clock::now() + std::chrono::milliseconds(500);
    for (int w = 0; multi ? w < warm_blocks : Clock::now() < warm_end; ++w) {
        for (int i = 0; i < 100; ++i) one();
        sync();
    }
    if (ab_cpu && cuda) {
        // What the shim's capture check costs on its own (every op outside a group, with GPU tracking): the driver's
        // cuStreamIsCapturing on the loop's stream.
        using IsCapturing = int (*)(cudaStream_t, int*);
        void* cuda_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        auto is_capturing = cuda_lib ? reinterpret_cast<IsCapturing>(dlsym(cuda_lib, "cuStreamIsCapturing")) : nullptr;
        if (is_capturing) {
            int status = 0;
            constexpr int kCalls = 200000;
            for (int i = 0; i < 1000; ++i) is_capturing(streams[0], &status);
            const auto t0 = Clock::now();
            for (int i = 0; i < kCalls; ++i) is_capturing(streams[0], &status);
            printf("driver cuStreamIsCapturing: %.1f ns/call\n",
                   std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kCalls);
        }
    }
    if (ab_cpu) {
        NcclFns real;
        if (!load_real_nccl(real)) {
            fprintf(stderr, "call_cost: cannot find libnccl.so.2's own entry points\n");
            return 2;
        }
        const bool same = real.all_reduce == linked.all_reduce;
        auto batch = [&](const NcclFns& f) {
            auto t0 = Clock::now();
            for (int i = 0; i < calls; ++i) one_via(f);
            auto t1 = Clock::now();
            sync();
            return std::chrono::duration<double, std::nano>(t1 - t0).count() / calls;
        };
        for (int w = 0; w < 10; ++w) {
            batch(real);
            batch(linked);
        }
        std::vector<double> a, b, d;
        for (int r = 0; r < rounds; ++r) {
            double ta, tb;
            if (r % 2) {  // ABBA: a drift during the run cancels
                ta = batch(real);
                tb = batch(linked);
            } else {
                tb = batch(linked);
                ta = batch(real);
            }
            a.push_back(ta);
            b.push_back(tb);
            d.push_back(tb - ta);
        }
        printf("nccl %d %s: median %.1f ns/call, p10 %.1f, p90 %.1f (%d batches of %d)\n", version,
               cuda ? "GPU" : "fake", median_of(b), quantile_of(b, 1, 10), quantile_of(b, 9, 10), rounds, calls);
        printf(
            "abcpu nccl %d %s, %s: NCCL's own %.1f ns/call, linked %.1f ns/call; added: median %.1f ns, p10 %.1f, "
            "p90 %.1f (%d pairs of %d calls)\n",
            version, cuda ? "GPU" : "fake", same ? "A/A (no shim)" : "linked = the shim", median_of(a), median_of(b),
            median_of(d), quantile_of(d, 1, 10), quantile_of(d, 9, 10), rounds, calls);
        for (auto c : comms) ncclCommDestroy(c);
        return 0;
    }
    std::vector<double> per_call;
    for (int b = 0; b < batches + 5; ++b) {
        auto t0 = Clock::now();
        for (int i = 0; i < calls; ++i) one();
        auto t1 = Clock::now();
        sync();
        if (b >= 5) per_call.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);  // warm
    }
    printf("nccl %d %s%s: median %.1f ns/call, p10 %.1f, p90 %.1f (%d batches of %d)\n", version, cuda ? "GPU" : "fake",
           group > 0 ? (" group of " + std::to_string(group)).c_str() : "", median_of(per_call),
           quantile_of(per_call, 1, 10), quantile_of(per_call, 9, 10), batches, calls);
    for (auto c : comms) ncclCommDestroy(c);
    return 0;
}

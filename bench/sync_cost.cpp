// What the shim adds to the host's synchronisations (issue 42: shim/intercept/sync_hooks.cpp), in one process: the
// sequence torch runs to wait for a collective (cudaEventRecord on the NCCL stream, cudaStreamWaitEvent onto the
// current stream, cudaStreamSynchronize of it: `.item()`), and a cudaEventQuery of a done event (torch's watchdog),
// through the CUDA runtime's own entry points (dlsym of its handle) and through the ones this process links to, which
// are the shim's when it is preloaded. Blocks of ITERS sequences alternate between the two, ROUNDS times; the added
// time is the median over the rounds of (linked - own). Before timing, one all_reduce on a one-rank NCCL communicator
// (the shim's runtime starts there) on the NCCL stream, and a pause so that the shim's poller has seen that stream: the
// hooks then take their full path (the stream is an NCCL stream, the event stands for its ops).
//   sync_cost [--rounds R] [--iters ITERS] [--nccl-only]
// With the fake libcudart.so.13 / libnccl.so.2 / libcuda.so.1 (LD_LIBRARY_PATH, CPU) or the real ones (a GPU).
// --nccl-only: also time an NCCL stream's synchronisation directly (the stream's own cut).
// Prints "sync own X ns/seq, linked Y ns/seq; added: median Z ns per sequence of 3 calls", and the same for the query.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Stream = void*;
using Event = void*;

struct Cudart {
    int (*set_device)(int) = nullptr;
    int (*stream_create)(Stream*) = nullptr;
    int (*event_create)(Event*) = nullptr;
    int (*malloc_fn)(void**, size_t) = nullptr;
    int (*record)(Event, Stream) = nullptr;
    int (*wait)(Stream, Event, unsigned) = nullptr;
    int (*sync)(Stream) = nullptr;
    int (*query)(Event) = nullptr;
};

template <typename F>
void get(void* h, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(h, name));
    if (!out) {
        fprintf(stderr, "sync_cost: no %s\n", name);
        exit(2);
    }
}

// The set-up calls are optional: the fake libcudart.so.13 has none but cudaEventCreate, and takes any stream handle.
template <typename F>
void maybe(void* h, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(h, name));
}

Cudart load(void* h) {
    Cudart c;
    maybe(h, "cudaSetDevice", c.set_device);
    maybe(h, "cudaStreamCreate", c.stream_create);
    get(h, "cudaEventCreate", c.event_create);
    maybe(h, "cudaMalloc", c.malloc_fn);
    get(h, "cudaEventRecord", c.record);
    get(h, "cudaStreamWaitEvent", c.wait);
    get(h, "cudaStreamSynchronize", c.sync);
    get(h, "cudaEventQuery", c.query);
    return c;
}

double now_ns() {
    return double(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

// One all_reduce on a one-rank communicator, through the linked (the shim's) entry points.
bool nccl_op(Stream s, void* buf) {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return false;
    struct Id {
        char internal[128];
    };
    using GetId = int (*)(Id*);
    using Init = int (*)(void**, int, Id, int);
    using AllReduce = int (*)(const void*, void*, size_t, int, int, void*, Stream);
    auto get_id = reinterpret_cast<GetId>(dlsym(RTLD_DEFAULT, "ncclGetUniqueId"));
    auto init = reinterpret_cast<Init>(dlsym(RTLD_DEFAULT, "ncclCommInitRank"));
    auto all_reduce = reinterpret_cast<AllReduce>(dlsym(RTLD_DEFAULT, "ncclAllReduce"));
    if (!get_id || !init || !all_reduce) return false;
    Id id;
    void* comm = nullptr;
    if (get_id(&id) != 0 || init(&comm, 1, id, 0) != 0) return false;
    return all_reduce(buf, buf, 2, 7 /* float32 */, 0 /* sum */, comm, s) == 0;
}

}  // namespace

int main(int argc, char** argv) {
    int rounds = 15, iters = 2000;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: sync_cost [--rounds R] [--iters ITERS]\n");
            return 2;
        }
    }
    if (rounds < 1 || iters < 1) return 2;
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "sync_cost: no libcudart: %s\n", dlerror());
        return 2;
    }
    const Cudart own = load(h);
    const Cudart linked = load(RTLD_DEFAULT);
    if (own.set_device) own.set_device(0);
    Stream nccl_stream = reinterpret_cast<Stream>(0x1000), current = reinterpret_cast<Stream>(0x2000);
    Event ev = nullptr;
    static float host_buf[16];
    void* buf = host_buf;
    if ((own.stream_create && (own.stream_create(&nccl_stream) || own.stream_create(&current))) ||
        own.event_create(&ev) || (own.malloc_fn && own.malloc_fn(&buf, 64))) {
        fprintf(stderr, "sync_cost: CUDA set-up failed\n");
        return 2;
    }
    const bool nccl = nccl_op(nccl_stream, buf);
    linked.sync(nccl_stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the shim's poller sees the NCCL stream
    auto seq = [&](const Cudart& c) {
        const double t0 = now_ns();
        for (int i = 0; i < iters; ++i) {
            c.record(ev, nccl_stream);
            c.wait(current, ev, 0);
            c.sync(current);
        }
        return (now_ns() - t0) / iters;
    };
    auto query = [&](const Cudart& c) {
        const double t0 = now_ns();
        for (int i = 0; i < iters; ++i) c.query(ev);
        return (now_ns() - t0) / iters;
    };
    seq(own), seq(linked), query(own), query(linked);  // warm
    std::vector<double> s_own, s_lnk, s_add, q_own, q_lnk, q_add;
    for (int r = 0; r < rounds; ++r) {
        const bool own_first = r % 2 == 0;
        const double a = own_first ? seq(own) : seq(linked);
        const double b = own_first ? seq(linked) : seq(own);
        s_own.push_back(own_first ? a : b), s_lnk.push_back(own_first ? b : a);
        s_add.push_back(s_lnk.back() - s_own.back());
        const double qa = own_first ? query(own) : query(linked);
        const double qb = own_first ? query(linked) : query(own);
        q_own.push_back(own_first ? qa : qb), q_lnk.push_back(own_first ? qb : qa);
        q_add.push_back(q_lnk.back() - q_own.back());
    }
    auto med = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    printf("sync_cost: %s, NCCL op on the stream: %s; %d rounds of %d\n",
           dlsym(RTLD_DEFAULT, "ncclwatch_note_exception") ? "shim preloaded" : "no shim", nccl ? "yes" : "no", rounds,
           iters);
    printf("sync own %.1f ns/seq, linked %.1f ns/seq; added: median %.1f ns per sequence of 3 calls\n", med(s_own),
           med(s_lnk), med(s_add));
    printf("query own %.1f ns/call, linked %.1f ns/call; added: median %.1f ns per call\n", med(q_own), med(q_lnk),
           med(q_add));
    return 0;
}

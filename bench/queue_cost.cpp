// The completion queues' hot-path operations alone, MpmcQueue against moodycamel (shim/token_queue.h): per op, one
// free-event pop and one Pending push, as CompletionTracker::record does; between batches of 64 the "poller" (the
// same thread here) drains the queue and returns the events. Measurement only (issue 16, point 6), not built by meson:
//   g++ -std=c++20 -O2 -g -Ishim bench/queue_cost.cpp -o /tmp/queue_cost -pthread
//   taskset -c 1 /tmp/queue_cost mpmc; taskset -c 1 /tmp/queue_cost moodycamel
//   valgrind --tool=callgrind /tmp/queue_cost mpmc   (then callgrind_annotate --inclusive=yes: hot_pop, hot_push)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "mpmc_queue.h"
#include "token_queue.h"
namespace ncw {
thread_local uint32_t tl_queue_slot __attribute__((tls_model("initial-exec"))) = 0;
uint32_t claim_queue_slot() {
    static std::atomic<uint32_t> next{0};
    tl_queue_slot = next.fetch_add(1) + 1;
    return tl_queue_slot;
}
}  // namespace ncw
using namespace ncw;
struct Pending {
    void* ev;
    void* pool;
    void* stream;
    void* cr;
    void* claim;
    uint64_t gen, f, fs, t;
    int kind, n;
    char refs[8 * 40];
};
template <class Free>
__attribute__((noinline)) bool hot_pop(Free& free, Pending& p) {
    return free.try_pop(p.ev);
}
template <class Q>
__attribute__((noinline)) bool hot_push(Q& q, Pending& p) {
    return q.try_push(p);
}
template <class Free, class Q>
__attribute__((noinline)) bool hot(Free& free, Q& q, Pending& p) {
    if (!hot_pop(free, p)) return false;
    return hot_push(q, p);
}
template <class Free, class Q>
__attribute__((noinline)) void drain(Free& free, Q& q) {
    Pending p;
    while (q.try_pop(p)) free.try_push(p.ev);
}
template <class Free, class Q>
void run(const char* name, Free& free, Q& q, bool other_thread) {
    for (uintptr_t i = 1; i <= 1024; ++i) free.try_push((void*)i);
    Pending p{};
    const int batches = 200, per = 64;
    std::atomic<bool> stop{false};
    std::thread poller;
    if (other_thread)
        poller = std::thread([&] {
            while (!stop.load()) drain(free, q);
        });
    long fails = 0;
    double best = 1e18;
    auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batches * 100; ++b) {
        auto a = std::chrono::steady_clock::now();
        for (int i = 0; i < per; ++i) fails += !hot(free, q, p);
        auto z = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::nano>(z - a).count() / per);
        if (!other_thread) drain(free, q);
    }
    auto t1 = std::chrono::steady_clock::now();
    printf("%s: fastest batch of %d: %.1f ns per op (pop + push, without the drain)\n", name, per, best);
    stop = true;
    if (poller.joinable()) poller.join();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (batches * 100.0 * per);
    printf("%s: %.1f ns per op (incl. drain%s), fails %ld\n", name, ns, other_thread ? " on another thread" : "",
           fails);
}
int main(int argc, char** argv) {
    if (argc < 2) return 2;
    bool other = argc > 2 && !strcmp(argv[2], "thread");  // the poller on a second thread
    if (!strcmp(argv[1], "mpmc")) {
        auto* f = new MpmcQueue<void*>(1024);
        auto* q = new MpmcQueue<Pending>(8192);
        run("mpmc", *f, *q, other);
    } else {
        auto* f = new TokenQueue<void*>(1024);
        auto* q = new TokenQueue<Pending>(1024);
        run("moodycamel", *f, *q, other);
    }
}

// What a timestamp costs on this machine: clock_gettime(CLOCK_MONOTONIC) against rdtsc. The shim's hot path takes
// two timestamps per call, which is why it reads the TSC where the CPU flags allow (shim/base/clock.h).
#include <time.h>
#include <x86intrin.h>

#include <chrono>
#include <cstdio>

int main() {
    constexpr int n = 2000000;
    timespec ts;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) clock_gettime(CLOCK_MONOTONIC, &ts);
    auto t1 = std::chrono::steady_clock::now();
    unsigned long long x = 0;
    for (int i = 0; i < n; i++) x += __rdtsc();
    auto t2 = std::chrono::steady_clock::now();
    printf("clock_gettime(CLOCK_MONOTONIC): %.1f ns, rdtsc: %.1f ns (%llu)\n",
           std::chrono::duration<double, std::nano>(t1 - t0).count() / n,
           std::chrono::duration<double, std::nano>(t2 - t1).count() / n, x & 1);
    return 0;
}

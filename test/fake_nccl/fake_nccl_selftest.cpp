// In-process checks of the fake libnccl.so.2: one process drives several ranks (ncclCommInitAll, or one thread per
// rank). Multi-process behaviour is covered by the fake_launch jobs in meson.build.
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../self_check.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void* fake_ptr(int i) { return reinterpret_cast<void*>(uintptr_t{0x10000} * (i + 1)); }  // never dereferenced

ncclResult_t all_reduce(ncclComm_t comm) {
    return ncclAllReduce(fake_ptr(0), fake_ptr(1), 1024, ncclFloat32, ncclSum, comm, nullptr);
}

// Runs fn(i) on n threads and joins them.
void on_threads(int n, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
    for (auto& t : threads) t.join();
}

}  // namespace

// Interposes on ncclBroadcast from the executable, as a preloaded shim would: the fake ncclBcast must land here.
std::atomic<int> g_broadcast_calls{0};
extern "C" ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, cudaStream_t stream) {
    ++g_broadcast_calls;
    return pncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
}

namespace {

void test_basics() {
    int version = 0;
    EXPECT(ncclGetVersion(&version) == ncclSuccess && version == 22809);
    EXPECT(std::strcmp(ncclGetErrorString(ncclSystemError),
                       "unhandled system error (run with NCCL_DEBUG=INFO for details)") == 0);
    void* p = nullptr;
    EXPECT(ncclMemAlloc(&p, 64) == ncclSuccess && p != nullptr);
    EXPECT(ncclMemFree(p) == ncclSuccess);
}

// nccl-tests -g 4: one thread, four ranks, every operation in one group.
void test_init_all_group() {
    ncclComm_t comms[4];
    const int devs[4] = {3, 5, 7, 9};
    EXPECT(ncclCommInitAll(comms, 4, devs) == ncclSuccess);
    for (int i = 0; i < 4; ++i) {
        int n = 0, r = -1, d = -1;
        EXPECT(ncclCommCount(comms[i], &n) == ncclSuccess && n == 4);
        EXPECT(ncclCommUserRank(comms[i], &r) == ncclSuccess && r == i);
        EXPECT(ncclCommCuDevice(comms[i], &d) == ncclSuccess && d == devs[i]);
    }
    for (int iter = 0; iter < 3; ++iter) {
        EXPECT(ncclGroupStart() == ncclSuccess);
        for (int i = 0; i < 4; ++i) {
            EXPECT(all_reduce(comms[i]) == ncclSuccess);  // queued: returns at once
            EXPECT(ncclSend(fake_ptr(2), 8, ncclInt8, (i + 1) % 4, comms[i], nullptr) == ncclSuccess);
            EXPECT(ncclRecv(fake_ptr(3), 8, ncclInt8, (i + 3) % 4, comms[i], nullptr) == ncclSuccess);
        }
        EXPECT(ncclGroupEnd() == ncclSuccess);
    }
    // Group nesting: only the outermost end runs the operations.
    EXPECT(ncclGroupStart() == ncclSuccess);
    EXPECT(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < 4; ++i)
        EXPECT(ncclBroadcast(fake_ptr(0), fake_ptr(0), 1, ncclInt32, 2, comms[i], nullptr) == 0);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    for (auto c : comms) EXPECT(ncclCommDestroy(c) == ncclSuccess);
}

// nccl-tests with several GPUs per thread: ncclCommInitRank for each rank inside one group.
void test_init_rank_in_group() {
    ncclUniqueId id;
    EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t comms[3];
    EXPECT(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < 3; ++i) EXPECT(ncclCommInitRank(&comms[i], 3, id, i) == ncclSuccess);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    EXPECT(ncclGroupStart() == ncclSuccess);
    for (auto c : comms) EXPECT(all_reduce(c) == ncclSuccess);
    EXPECT(ncclGroupEnd() == ncclSuccess);
    for (auto c : comms) EXPECT(ncclCommDestroy(c) == ncclSuccess);
}

void test_bcast_goes_through_broadcast() {
    ncclComm_t comm;
    EXPECT(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);
    int before = g_broadcast_calls.load();
    EXPECT(ncclBcast(fake_ptr(0), 16, ncclFloat32, 0, comm, nullptr) == ncclSuccess);
    EXPECT(g_broadcast_calls.load() == before + 1);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

void test_thread_per_rank_p2p_and_split() {
    ncclComm_t comms[4];
    EXPECT(ncclCommInitAll(comms, 4, nullptr) == ncclSuccess);
    ncclComm_t children[4] = {};
    on_threads(4, [&](int i) {
        // Blocking send/recv outside a group: 0 -> 1 and 2 -> 3.
        if (i % 2 == 0) EXPECT(ncclSend(fake_ptr(0), 4, ncclFloat32, i + 1, comms[i], nullptr) == ncclSuccess);
        if (i % 2 == 1) EXPECT(ncclRecv(fake_ptr(0), 4, ncclFloat32, i - 1, comms[i], nullptr) == ncclSuccess);
        // colors: 0, 1, 0, none; keys reverse the order within a color
        int color = i == 3 ? NCCL_SPLIT_NOCOLOR : i % 2;
        EXPECT(ncclCommSplit(comms[i], color, -i, &children[i], nullptr) == ncclSuccess);
        if (children[i] != nullptr) EXPECT(all_reduce(children[i]) == ncclSuccess);
    });
    int n = 0, r = -1;
    EXPECT(children[3] == nullptr);
    EXPECT(ncclCommCount(children[0], &n) == ncclSuccess && n == 2);
    EXPECT(ncclCommUserRank(children[0], &r) == ncclSuccess && r == 1);
    EXPECT(ncclCommUserRank(children[2], &r) == ncclSuccess && r == 0);
    EXPECT(ncclCommCount(children[1], &n) == ncclSuccess && n == 1);
    for (auto c : children) EXPECT(ncclCommDestroy(c) == ncclSuccess);  // NULL is accepted
    for (auto c : comms) EXPECT(ncclCommDestroy(c) == ncclSuccess);
}

// Rank 3 is gone: the others revoke the parent and shrink it away.
void test_revoke_and_shrink() {
    ncclComm_t comms[4];
    EXPECT(ncclCommInitAll(comms, 4, nullptr) == ncclSuccess);
    ncclComm_t children[3] = {};
    on_threads(3, [&](int i) {
        int exclude[] = {3};
        EXPECT(ncclCommRevoke(comms[i], NCCL_REVOKE_DEFAULT) == ncclSuccess);
        EXPECT(all_reduce(comms[i]) == ncclInvalidUsage);
        EXPECT(ncclCommShrink(comms[i], exclude, 1, &children[i], nullptr, NCCL_SHRINK_DEFAULT) == ncclSuccess);
        EXPECT(all_reduce(children[i]) == ncclSuccess);
    });
    for (int i = 0; i < 3; ++i) {
        int n = 0, r = -1;
        EXPECT(ncclCommCount(children[i], &n) == ncclSuccess && n == 3);
        EXPECT(ncclCommUserRank(children[i], &r) == ncclSuccess && r == i);
        EXPECT(ncclCommDestroy(children[i]) == ncclSuccess);
    }
    for (auto c : comms) EXPECT(ncclCommDestroy(c) == ncclSuccess);
}

void test_abort_unblocks() {
    ncclComm_t comms[2];
    EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
    ncclResult_t blocked_result = ncclSuccess;
    double blocked_for = 0;
    std::thread t([&] {
        auto start = Clock::now();
        blocked_result = all_reduce(comms[0]);  // rank 1 never joins in
        blocked_for = seconds_since(start);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto abort_at = Clock::now();
    EXPECT(ncclCommAbort(comms[0]) == ncclSuccess);
    t.join();
    EXPECT(blocked_result == ncclSystemError);
    EXPECT(seconds_since(abort_at) < 0.5);
    EXPECT(blocked_for >= 0.09);
    ncclResult_t async = ncclSuccess;
    EXPECT(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclSystemError);
    // The peer completes the collective the aborted rank had posted, then fails promptly on the next one.
    EXPECT(all_reduce(comms[1]) == ncclSuccess);
    auto start = Clock::now();
    EXPECT(all_reduce(comms[1]) == ncclSystemError);
    EXPECT(seconds_since(start) < 0.5);
    EXPECT(ncclCommDestroy(comms[1]) == ncclSuccess);
}

void test_timeout() {
    ncclComm_t comms[2];
    EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
    ncclResult_t async = ncclInProgress;
    EXPECT(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclSuccess);
    auto start = Clock::now();
    EXPECT(all_reduce(comms[0]) == ncclSystemError);  // FAKE_NCCL_TIMEOUT_SEC=1, see main
    double waited = seconds_since(start);
    EXPECT(waited >= 0.95 && waited < 5);
    EXPECT(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclSystemError);
    EXPECT(std::strstr(ncclGetLastError(comms[0]), "timed out") != nullptr);
    start = Clock::now();
    EXPECT(all_reduce(comms[0]) == ncclSystemError);  // a communicator in error fails at once
    EXPECT(seconds_since(start) < 0.5);
    for (auto c : comms) EXPECT(ncclCommDestroy(c) == ncclSuccess);
}

void test_errors() {
    ncclComm_t comm;
    EXPECT(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);
    EXPECT(ncclBroadcast(fake_ptr(0), fake_ptr(0), 1, ncclInt32, 1, comm, nullptr) == ncclInvalidArgument);
    // An error inside a group fails the group, which then runs nothing.
    EXPECT(ncclGroupStart() == ncclSuccess);
    EXPECT(all_reduce(comm) == ncclSuccess);
    EXPECT(ncclSend(fake_ptr(0), 1, ncclInt32, 5, comm, nullptr) == ncclInvalidArgument);
    EXPECT(ncclGroupEnd() == ncclInvalidArgument);
    EXPECT(ncclGroupEnd() == ncclInvalidUsage);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT(ncclGroupStart() == ncclSuccess);
    EXPECT(all_reduce(comm) == ncclSuccess);
    EXPECT(ncclGroupSimulateEnd(&sim) == ncclSuccess);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
    int n = 0;
    EXPECT(ncclCommCount(comm, &n) == ncclInvalidArgument);  // destroyed handles are caught
    EXPECT(ncclCommCount(nullptr, &n) == ncclInvalidArgument);
}

}  // namespace

int main() {
    setenv("FAKE_NCCL_TIMEOUT_SEC", "1", 1);  // read once, at the first wait
    test_basics();
    test_init_all_group();
    test_init_rank_in_group();
    test_bcast_goes_through_broadcast();
    test_thread_per_rank_p2p_and_split();
    test_revoke_and_shrink();
    test_abort_unblocks();
    test_timeout();
    test_errors();
    return ncw_test::check_summary("fake_nccl_selftest");
}

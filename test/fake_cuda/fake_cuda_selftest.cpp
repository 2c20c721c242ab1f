// Checks the fake libcuda.so.1 against what fake_cuda.h promises. Exit 0 when every check passes.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "../self_check.h"
#include "fake_cuda.h"

namespace {

void* s(uintptr_t v) { return reinterpret_cast<void*>(v); }
CUstream cs(uintptr_t v) { return reinterpret_cast<CUstream>(v); }

FakeCudaStats stats() {
    FakeCudaStats st{};
    fakecuda_stats(&st);
    return st;
}

CUevent new_event() {
    CUdevice dev;
    CUcontext ctx;
    EXPECT(cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
    EXPECT(cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
    EXPECT(cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
    CUevent ev = nullptr;
    EXPECT(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
    CUcontext popped = nullptr;
    EXPECT(cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == ctx);
    return ev;
}

void driver_basics() {
    CUdevice dev;
    EXPECT(cuDeviceGet(&dev, 0) == CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuInit(0) == CUDA_SUCCESS);
    int version = 0;
    EXPECT(cuDriverGetVersion(&version) == CUDA_SUCCESS && version >= 12000);
    EXPECT(cuDeviceGet(&dev, 3) == CUDA_SUCCESS && dev == 3);
    EXPECT(cuDeviceGet(&dev, -1) == CUDA_ERROR_INVALID_DEVICE);
    char bus[32];
    EXPECT(cuDeviceGetPCIBusId(bus, sizeof bus, 3) == CUDA_SUCCESS && std::strcmp(bus, "0000:13:00.0") == 0);
    CUuuid uuid{};
    EXPECT(cuDeviceGetUuid(&uuid, 3) == CUDA_SUCCESS && (unsigned char)uuid.bytes[0] == 0xfa && uuid.bytes[15] == 3);
    EXPECT(cuDeviceGetUuid(&uuid, -1) == CUDA_ERROR_INVALID_DEVICE);
    CUevent ev = nullptr;
    EXPECT(cuEventCreate(&ev, 0) == CUDA_ERROR_INVALID_CONTEXT);  // no current context

    // By base name, the ABI the shim asks for; unknown names are not found.
    void* fn = nullptr;
    CUdriverProcAddressQueryResult st{};
    EXPECT(cuGetProcAddress("cuCtxPushCurrent", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS);
    EXPECT(fn == reinterpret_cast<void*>(&cuCtxPushCurrent_v2) && st == CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_ERROR_NOT_FOUND);
    EXPECT(fn == nullptr && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    // What shim/base/cuda_driver.cpp falls back to.
    void* self = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    EXPECT(self != nullptr);
    for (const char* name :
         {"cuInit", "cuDriverGetVersion", "cuGetProcAddress_v2", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
          "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxSetCurrent", "cuEventCreate", "cuEventRecord",
          "cuEventQuery", "cuStreamIsCapturing", "cuThreadExchangeStreamCaptureMode", "cuDeviceGetPCIBusId",
          "cuDeviceGetUuid", "cuDeviceGetUuid_v2"}) {
        if (dlsym(self, name) == nullptr) {
            std::fprintf(stderr, "libcuda.so.1 lacks %s\n", name);
            ++ncw_test::check_failures();
        }
    }
}

void events_follow_stream_order() {
    CUevent ev = new_event();
    EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);  // never recorded
    // Not held: work completes at once.
    fakecuda_enqueue(s(0x100));
    EXPECT(cuEventRecord(ev, cs(0x100)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);
    // Held: earlier work is done, later work waits, and so does an event after it; another stream is unaffected.
    fakecuda_hold(s(0x100), 1);
    CUevent before = new_event();
    EXPECT(cuEventRecord(before, cs(0x100)) == CUDA_SUCCESS);
    fakecuda_enqueue(s(0x100));
    CUevent after = new_event();
    EXPECT(cuEventRecord(after, cs(0x100)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(before) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(after) == CUDA_ERROR_NOT_READY);
    fakecuda_enqueue(nullptr);  // the null stream is a stream like any other
    CUevent other = new_event();
    EXPECT(cuEventRecord(other, nullptr) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(other) == CUDA_SUCCESS);
    fakecuda_hold(s(0x100), 0);
    EXPECT(cuEventQuery(after) == CUDA_SUCCESS);
    // Re-recording re-arms.
    fakecuda_hold(s(0x100), 1);
    fakecuda_enqueue(s(0x100));
    EXPECT(cuEventRecord(after, cs(0x100)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(after) == CUDA_ERROR_NOT_READY);
    fakecuda_hold(s(0x100), 0);
    EXPECT(cuEventQuery(after) == CUDA_SUCCESS);
}

void hold_file() {
    const char* path = std::getenv("FAKE_CUDA_HOLD_FILE");
    EXPECT(path != nullptr);
    if (path == nullptr) return;
    CUevent ev = new_event();
    std::FILE* f = std::fopen(path, "w");
    EXPECT(f != nullptr);
    if (f) std::fclose(f);
    fakecuda_enqueue(s(0x200));
    EXPECT(cuEventRecord(ev, cs(0x200)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev) == CUDA_ERROR_NOT_READY);
    std::remove(path);
    EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);

    // A number in the file: each held stream completes its first that many items, and never goes back.
    f = std::fopen(path, "w");
    EXPECT(f != nullptr);
    if (f) std::fclose(f);
    CUevent ev_at[6];
    for (int i = 0; i < 6; ++i) {  // on a new stream: ev_at[i] is complete once its first i items are
        ev_at[i] = new_event();
        EXPECT(cuEventRecord(ev_at[i], cs(0x210)) == CUDA_SUCCESS);
        fakecuda_enqueue(s(0x210));
    }
    EXPECT(cuEventQuery(ev_at[0]) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev_at[1]) == CUDA_ERROR_NOT_READY);
    auto write_limit = [&](const char* n) {
        std::FILE* w = std::fopen(path, "w");
        EXPECT(w != nullptr);
        if (w) {
            std::fputs(n, w);
            std::fclose(w);
        }
    };
    write_limit("4\n");
    EXPECT(cuEventQuery(ev_at[4]) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev_at[5]) == CUDA_ERROR_NOT_READY);
    write_limit("2");  // a lower number takes nothing back
    EXPECT(cuEventQuery(ev_at[4]) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev_at[5]) == CUDA_ERROR_NOT_READY);
    write_limit("7");  // never past what was enqueued; the items up to it complete as they come
    EXPECT(cuEventQuery(ev_at[5]) == CUDA_SUCCESS);
    CUevent later = new_event();
    fakecuda_enqueue(s(0x210));  // item 7
    EXPECT(cuEventRecord(later, cs(0x210)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(later) == CUDA_SUCCESS);
    fakecuda_enqueue(s(0x210));  // item 8: past the limit
    EXPECT(cuEventRecord(later, cs(0x210)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(later) == CUDA_ERROR_NOT_READY);
    std::remove(path);
    EXPECT(cuEventQuery(later) == CUDA_SUCCESS);
}

void capture() {
    CUevent ev = new_event();
    const FakeCudaStats s0 = stats();
    fakecuda_set_capturing(s(0x300), 1);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT(cuStreamIsCapturing(cs(0x300), &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT(cuStreamIsCapturing(cs(0x301), &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_NONE);
    fakecuda_hold(s(0x300), 1);
    fakecuda_enqueue(s(0x300));  // captured: never runs, so it holds nothing up
    EXPECT(cuEventRecord(ev, cs(0x300)) == CUDA_SUCCESS);
    uint64_t capturing = 0;
    EXPECT(fakecuda_stream_records(s(0x300), &capturing) == 1 && capturing == 1);
    // Querying from this thread (global mode) during a capture is a violation; a relaxed thread may.
    EXPECT(cuEventQuery(ev) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    std::thread([&] {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        EXPECT(cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS && mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
        EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);  // recorded into the capture only: not armed
        CUstreamCaptureStatus st2 = CU_STREAM_CAPTURE_STATUS_NONE;
        EXPECT(cuStreamIsCapturing(cs(0x300), &st2) == CUDA_SUCCESS && st2 == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    }).join();
    fakecuda_set_capturing(s(0x300), 0);
    fakecuda_hold(s(0x300), 0);
    EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);
    const FakeCudaStats s1 = stats();
    EXPECT(s1.captured - s0.captured == 1);
    EXPECT(s1.enqueued == s0.enqueued);
    EXPECT(s1.records_while_capturing - s0.records_while_capturing == 1);
    EXPECT(s1.capture_violations - s0.capture_violations == 1);
    EXPECT(s1.capture_checks_active - s0.capture_checks_active == 1);
}

// The fake libcudart.so.13's events, stream waits and synchronisations (fake_cudart.cpp), found beside this library.
void runtime() {
    void* rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    EXPECT(rt != nullptr);
    if (rt == nullptr) return;
    auto fn = [&](const char* name) {
        void* p = dlsym(rt, name);
        if (p == nullptr) {
            std::fprintf(stderr, "libcudart.so.13 lacks %s\n", name);
            ++ncw_test::check_failures();
        }
        return p;
    };
    using Ev1 = int (*)(void*);
    using Create = int (*)(void**);
    using Rec = int (*)(void*, void*);
    using Wait = int (*)(void*, void*, unsigned);
    using Dev = int (*)();
    auto create = reinterpret_cast<Create>(fn("cudaEventCreate"));
    auto destroy = reinterpret_cast<Ev1>(fn("cudaEventDestroy"));
    auto record = reinterpret_cast<Rec>(fn("cudaEventRecord"));
    auto record_ptsz = reinterpret_cast<Rec>(fn("cudaEventRecord_ptsz"));
    auto query = reinterpret_cast<Ev1>(fn("cudaEventQuery"));
    auto ev_sync = reinterpret_cast<Ev1>(fn("cudaEventSynchronize"));
    auto wait = reinterpret_cast<Wait>(fn("cudaStreamWaitEvent"));
    auto st_sync = reinterpret_cast<Ev1>(fn("cudaStreamSynchronize"));
    auto st_query = reinterpret_cast<Ev1>(fn("cudaStreamQuery"));
    auto dev_sync = reinterpret_cast<Dev>(fn("cudaDeviceSynchronize"));
    auto st_destroy = reinterpret_cast<Ev1>(fn("cudaStreamDestroy"));
    for (const char* name : {"cudaEventCreateWithFlags", "cudaEventRecordWithFlags", "cudaEventRecordWithFlags_ptsz",
                             "cudaStreamWaitEvent_ptsz", "cudaStreamSynchronize_ptsz", "cudaStreamQuery_ptsz"})
        fn(name);
    if (!create || !destroy || !record || !record_ptsz || !query || !ev_sync || !wait || !st_sync || !st_query ||
        !dev_sync || !st_destroy)
        return;
    const FakeCudaStats s0 = stats();
    void* nccl = s(0x500);     // a collective's stream
    void* compute = s(0x510);  // torch's compute stream
    void* ev = nullptr;
    EXPECT(create(&ev) == 0 && ev != nullptr);
    EXPECT(query(ev) == 0);  // never recorded

    // torch's wait for a collective: an event after it on its stream, the compute stream waits on it, .item()
    // synchronises the compute stream. Held: the compute stream is not done, though nothing of its own is pending.
    fakecuda_hold(nccl, 1);
    fakecuda_enqueue(nccl);
    EXPECT(record(ev, nccl) == 0);
    EXPECT(query(ev) == 600);
    EXPECT(st_query(compute) == 0);
    EXPECT(wait(compute, ev, 0) == 0);
    EXPECT(st_query(compute) == 600);
    EXPECT(st_query(nccl) == 600);
    // An event recorded on the compute stream after the wait stands for the collective too.
    void* after = nullptr;
    EXPECT(create(&after) == 0);
    EXPECT(record_ptsz(after, compute) == 0);
    EXPECT(query(after) == 600);
    // Work enqueued after the wait is not waited for by an earlier synchronisation's mark, and a later record of the
    // event leaves the earlier wait standing.
    fakecuda_enqueue(nccl);
    EXPECT(record(ev, nccl) == 0);
    // A synchronisation blocks while the stream is held, and returns once it is released.
    auto t0 = std::chrono::steady_clock::now();
    std::thread release([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        fakecuda_hold(nccl, 0);
    });
    EXPECT(st_sync(compute) == 0);
    EXPECT(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(90));
    release.join();
    EXPECT(query(after) == 0 && query(ev) == 0 && st_query(compute) == 0 && st_query(nccl) == 0);
    EXPECT(ev_sync(ev) == 0 && st_sync(nccl) == 0 && dev_sync() == 0);

    // Device synchronisation: every stream's work so far.
    fakecuda_hold(s(0x520), 1);
    fakecuda_enqueue(s(0x520));
    t0 = std::chrono::steady_clock::now();
    std::thread release2([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        fakecuda_hold(s(0x520), 0);
    });
    EXPECT(dev_sync() == 0);
    EXPECT(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(90));
    release2.join();

    // A destroyed stream forgets what it waited on.
    fakecuda_hold(nccl, 1);
    fakecuda_enqueue(nccl);
    EXPECT(record(ev, nccl) == 0 && wait(compute, ev, 0) == 0 && st_query(compute) == 600);
    EXPECT(st_destroy(compute) == 0 && st_query(compute) == 0);
    // Given up after FAKE_CUDA_SYNC_TIMEOUT_SEC (1 s in this test's environment): cudaErrorUnknown.
    t0 = std::chrono::steady_clock::now();
    EXPECT(ev_sync(ev) == 999);
    EXPECT(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(900));
    fakecuda_hold(nccl, 0);
    EXPECT(ev_sync(ev) == 0);
    EXPECT(destroy(ev) == 0 && destroy(after) == 0);

    // Under capture: a record is a node of the graph (not armed), a synchronisation is illegal.
    fakecuda_set_capturing(s(0x530), 1);
    EXPECT(create(&ev) == 0 && record(ev, s(0x530)) == 0 && query(ev) == 0);
    EXPECT(st_sync(s(0x530)) == 900 && st_query(s(0x530)) == 900);
    fakecuda_set_capturing(s(0x530), 0);
    EXPECT(destroy(ev) == 0);

    const FakeCudaStats s1 = stats();
    EXPECT(s1.event_records == s0.event_records);  // the runtime's records are not the driver's
    EXPECT(s1.runtime_records - s0.runtime_records == 5);
    EXPECT(s1.stream_waits - s0.stream_waits == 2);
    EXPECT(s1.synchronizes - s0.synchronizes == 7);
    EXPECT(s1.sync_timeouts - s0.sync_timeouts == 1);
}

// FAKE_CUDA_HOLD_ALL=1 (a run of its own): every stream is held from its first use, until released.
void hold_all() {
    EXPECT(cuInit(0) == CUDA_SUCCESS);
    CUevent ev = new_event();
    fakecuda_enqueue(s(0x400));
    EXPECT(cuEventRecord(ev, cs(0x400)) == CUDA_SUCCESS);
    EXPECT(cuEventQuery(ev) == CUDA_ERROR_NOT_READY);
    fakecuda_hold(s(0x400), 0);
    EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);
}

}  // namespace

int main() {
    if (const char* a = std::getenv("FAKE_CUDA_HOLD_ALL"); a != nullptr && std::strcmp(a, "1") == 0) {
        hold_all();
        return ncw_test::check_summary("fake_cuda_selftest (FAKE_CUDA_HOLD_ALL=1)");
    }
    driver_basics();
    events_follow_stream_order();
    hold_file();
    capture();
    runtime();
    return ncw_test::check_summary("fake_cuda_selftest");
}

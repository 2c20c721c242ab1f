// The fake libcuda.so.1: see fake_cuda.h for its semantics. Only what shim/base/cuda_driver.cpp loads is implemented.
#include "fake_cuda.h"

#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr int kDevices = 64;
constexpr uint32_t kEventMagic = 0x45564e54;  // "EVNT"

// (stream, items): complete once the stream has completed that many items.
using Cut = std::pair<uintptr_t, uint64_t>;

struct Stream {
    uint64_t enqueued = 0;
    uint64_t completed = 0;
    bool held = false;
    bool capturing = false;
    uint64_t records = 0;
    uint64_t records_capturing = 0;
    uintptr_t graph = 0;       // the graph its capture builds (0: not capturing)
    uintptr_t last_graph = 0;  // the graph of its last capture that ended
    std::vector<Cut> waits;    // what the events it waited on stood for (cudaStreamWaitEvent), not yet seen complete
};

// A captured graph: the nodes a launch runs, in capture order (fakecuda_capture_node).
struct Graph {
    std::vector<std::pair<int (*)(void*), void*>> nodes;
};

struct Event {
    uint32_t magic = kEventMagic;
    bool armed = false;  // recorded outside a capture: `target` on `stream` says when it is complete
    uintptr_t stream = 0;
    uint64_t target = 0;
    std::vector<Cut> waits;  // what its stream had waited on when it was recorded
};

struct Context {
    int dev = 0;
};

struct State {
    std::mutex mu;
    std::unordered_map<uintptr_t, Stream> streams;
    int capturing_streams = 0;
    std::unordered_map<uintptr_t, Graph> graphs;
    uintptr_t next_graph = 0x67000;  // graph handles: any value, never 0
    FakeCudaStats stats{};
    bool initialized = false;
    Context contexts[kDevices];
    const char* hold_file = nullptr;
    bool no_proc_address = false;
    bool hold_all = false;            // FAKE_CUDA_HOLD_ALL=1: every stream starts held
    double sync_timeout_sec = 120.0;  // FAKE_CUDA_SYNC_TIMEOUT_SEC: fakecuda_event_wait gives up after it

    State() {
        for (int i = 0; i < kDevices; ++i) contexts[i].dev = i;
        const char* h = std::getenv("FAKE_CUDA_HOLD_FILE");
        hold_file = h != nullptr && *h != '\0' ? h : nullptr;
        const char* n = std::getenv("FAKE_CUDA_NO_PROC_ADDRESS");
        no_proc_address = n != nullptr && std::strcmp(n, "1") == 0;
        const char* a = std::getenv("FAKE_CUDA_HOLD_ALL");
        hold_all = a != nullptr && std::strcmp(a, "1") == 0;
        if (const char* t = std::getenv("FAKE_CUDA_SYNC_TIMEOUT_SEC"); t != nullptr && *t != '\0') {
            const double v = std::strtod(t, nullptr);
            if (v > 0) sync_timeout_sec = v;
        }
    }

    Stream& stream(uintptr_t s) {
        auto [it, added] = streams.try_emplace(s);
        if (added) {
            ++stats.streams;
            it->second.held = hold_all;
        }
        return it->second;
    }

    // Brings `completed` up to date: everything enqueued is done unless the stream is held. While the hold file
    // exists, a number in it lets each stream complete its first that many items (a GPU that got that far).
    void settle(Stream& st) const {
        if (st.held) return;
        if (hold_file != nullptr) {
            if (std::FILE* f = std::fopen(hold_file, "r")) {
                unsigned long long upto = 0;
                const bool limited = std::fscanf(f, "%llu", &upto) == 1;
                std::fclose(f);
                if (limited && upto > st.completed) st.completed = upto < st.enqueued ? upto : st.enqueued;
                return;
            }
        }
        st.completed = st.enqueued;
    }

    bool done(const Cut& c) {
        Stream& st = stream(c.first);
        settle(st);
        return st.completed >= c.second;
    }
    // Drops the cuts already complete (completion only moves forward).
    void prune(std::vector<Cut>& cuts) {
        size_t keep = 0;
        for (const Cut& c : cuts)
            if (!done(c)) cuts[keep++] = c;
        cuts.resize(keep);
    }
    // What an event recorded on `s` now stands for: its items so far and what it waited on.
    void arm(Event& ev, uintptr_t s) {
        Stream& st = stream(s);
        prune(st.waits);
        ev.armed = true;
        ev.stream = s;
        ev.target = st.enqueued;
        ev.waits = st.waits;
    }
    bool done(Event& ev) {
        if (!ev.armed) return true;
        if (ev.target > 0 && !done(Cut{ev.stream, ev.target})) return false;  // 0 items: nothing to wait for
        prune(ev.waits);
        return ev.waits.empty();
    }
};

State& state() {
    static State* s = new State;  // never destroyed: the shim's threads may call in during exit
    return *s;
}

thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
thread_local CUcontext t_ctx_stack[16];
thread_local int t_ctx_depth = 0;  // t_ctx_stack[t_ctx_depth - 1] is current

uintptr_t key(const void* stream) { return reinterpret_cast<uintptr_t>(stream); }

}  // namespace

// ---- the driver API ----

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.initialized = true;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *version = 12080;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
    if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(pciBusId, size_t(len), "0000:%02x:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}

// Device d's UUID is GPU-fa4e0000-00dd-4000-8000-0000000000dd, dd = d in hex (fake_cuda_selftest.cpp, the e2e
// tests), from both entry points: cuda.h names cuDeviceGetUuid_v2 (what cuGetProcAddress serves from CUDA 11.4 on)
// "cuDeviceGetUuid", and the first one keeps its own name in the library (the fake has no MIG: they agree).
CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
    if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
    const unsigned char b[16] = {0xfa, 0x4e, 0, 0, 0, (unsigned char)dev, 0x40, 0, 0x80, 0,
                                 0,    0,    0, 0, 0, (unsigned char)dev};
    std::memcpy(uuid->bytes, b, sizeof b);
    return CUDA_SUCCESS;
}
#undef cuDeviceGetUuid
CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
    *pctx = reinterpret_cast<CUcontext>(&state().contexts[dev]);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_ctx_depth == 16) return CUDA_ERROR_OUT_OF_MEMORY;
    t_ctx_stack[t_ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
    if (t_ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = t_ctx_stack[--t_ctx_depth];
    if (pctx != nullptr) *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    if (ctx == nullptr) {
        if (t_ctx_depth > 0) --t_ctx_depth;
        return CUDA_SUCCESS;
    }
    if (t_ctx_depth == 0) t_ctx_depth = 1;
    t_ctx_stack[t_ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int /*flags*/) {
    if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (t_ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    *phEvent = reinterpret_cast<CUevent>(new Event);
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.events_created;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    auto* ev = reinterpret_cast<Event*>(hEvent);
    if (ev == nullptr || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(hStream));
    ++st.records;
    ++s.stats.event_records;
    if (st.capturing) {
        // A node of the captured graph: it does not re-arm the event now.
        ++st.records_capturing;
        ++s.stats.records_while_capturing;
        return CUDA_SUCCESS;
    }
    s.arm(*ev, key(hStream));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    auto* ev = reinterpret_cast<Event*>(hEvent);
    if (ev == nullptr || ev->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.event_queries;
    if (s.capturing_streams > 0 && t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        ++s.stats.capture_violations;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return s.done(*ev) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
    if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const bool capturing = s.stream(key(hStream)).capturing;
    *captureStatus = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (capturing && t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) ++s.stats.capture_checks_active;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
    if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out, const CUgraphNode** dependencies_out,
                                           size_t* numDependencies_out) {
    if (captureStatus_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const Stream& st = s.stream(key(hStream));
    *captureStatus_out = st.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id_out != nullptr) *id_out = st.graph;
    if (graph_out != nullptr) *graph_out = reinterpret_cast<CUgraph>(st.graph);
    if (dependencies_out != nullptr) *dependencies_out = nullptr;
    if (numDependencies_out != nullptr) *numDependencies_out = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int /*cudaVersion*/, cuuint64_t /*flags*/,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
    if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // By base name, as the driver serves them: the entry of the ABI the caller's CUDA version expects.
    static const struct {
        const char* name;
        void* fn;
    } table[] = {
        {"cuInit", reinterpret_cast<void*>(&cuInit)},
        {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
        {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
        {"cuDeviceGetPCIBusId", reinterpret_cast<void*>(&cuDeviceGetPCIBusId)},
        {"cuDeviceGetUuid", reinterpret_cast<void*>(&cuDeviceGetUuid_v2)},
        {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
        {"cuCtxPushCurrent", reinterpret_cast<void*>(&cuCtxPushCurrent_v2)},
        {"cuCtxPopCurrent", reinterpret_cast<void*>(&cuCtxPopCurrent_v2)},
        {"cuCtxSetCurrent", reinterpret_cast<void*>(&cuCtxSetCurrent)},
        {"cuEventCreate", reinterpret_cast<void*>(&cuEventCreate)},
        {"cuEventRecord", reinterpret_cast<void*>(&cuEventRecord)},
        {"cuEventQuery", reinterpret_cast<void*>(&cuEventQuery)},
        {"cuStreamIsCapturing", reinterpret_cast<void*>(&cuStreamIsCapturing)},
        {"cuStreamGetCaptureInfo", reinterpret_cast<void*>(&cuStreamGetCaptureInfo_v2)},
        {"cuThreadExchangeStreamCaptureMode", reinterpret_cast<void*>(&cuThreadExchangeStreamCaptureMode)},
        {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
    };
    State& s = state();
    *pfn = nullptr;
    if (!s.no_proc_address)
        for (const auto& e : table)
            if (std::strcmp(e.name, symbol) == 0) *pfn = e.fn;
    if (*pfn != nullptr) {
        std::lock_guard<std::mutex> lock(s.mu);
        ++s.stats.proc_address_found;
    }
    if (symbolStatus != nullptr)
        *symbolStatus = *pfn != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// ---- the test-facing API ----

void fakecuda_enqueue(void* stream) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(stream));
    if (st.capturing) {
        ++s.stats.captured;
        return;
    }
    ++st.enqueued;
    ++s.stats.enqueued;
    s.settle(st);
}

void fakecuda_hold(void* stream, int held) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(stream));
    st.held = held != 0;
    s.settle(st);
}

void fakecuda_set_capturing(void* stream, int capturing) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(stream));
    if (st.capturing != (capturing != 0)) s.capturing_streams += capturing != 0 ? 1 : -1;
    if (capturing != 0 && !st.capturing) {
        st.graph = s.next_graph += 0x10;
        s.graphs[st.graph];
    } else if (capturing == 0 && st.capturing) {
        st.last_graph = st.graph;
        st.graph = 0;
    }
    st.capturing = capturing != 0;
}

int fakecuda_capture_node(void* stream, int (*fn)(void*), void* arg) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(stream));
    if (!st.capturing) return 0;
    s.graphs[st.graph].nodes.emplace_back(fn, arg);
    return 1;
}

void* fakecuda_last_capture(void* stream) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    return reinterpret_cast<void*>(s.stream(key(stream)).last_graph);
}

int fakecuda_graph_run(void* graph) {
    std::vector<std::pair<int (*)(void*), void*>> nodes;
    {
        State& s = state();
        std::lock_guard<std::mutex> lock(s.mu);
        auto it = s.graphs.find(key(graph));
        if (it == s.graphs.end()) return 1;
        nodes = it->second.nodes;
    }
    // Outside the lock: a node is a whole operation, which may wait for its peers.
    for (auto& [fn, arg] : nodes)
        if (int r = fn(arg); r != 0) return r;
    return 0;
}

void fakecuda_stats(FakeCudaStats* out) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    *out = s.stats;
}

// ---- the runtime's side (fake_cudart.cpp) ----

namespace {
Event* as_event(void* e) {
    auto* ev = static_cast<Event*>(e);
    return ev != nullptr && ev->magic == kEventMagic ? ev : nullptr;
}
}  // namespace

void* fakecuda_event_new(void) { return new Event; }

int fakecuda_event_free(void* event) {
    Event* ev = as_event(event);
    if (ev == nullptr) return 1;
    ev->magic = 0;
    delete ev;
    return 0;
}

int fakecuda_event_record(void* event, void* stream) {
    Event* ev = as_event(event);
    if (ev == nullptr) return 1;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.runtime_records;
    if (s.stream(key(stream)).capturing) return 0;  // a node of the graph: not armed now (as cuEventRecord)
    s.arm(*ev, key(stream));
    return 0;
}

int fakecuda_event_done(void* event) {
    Event* ev = as_event(event);
    if (ev == nullptr) return -1;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.done(*ev) ? 1 : 0;
}

int fakecuda_stream_wait_event(void* stream, void* event) {
    Event* ev = as_event(event);
    if (ev == nullptr) return 1;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.stats.stream_waits;
    if (s.done(*ev)) return 0;  // nothing left to wait for
    Stream& st = s.stream(key(stream));
    st.waits.push_back(Cut{ev->stream, ev->target});
    st.waits.insert(st.waits.end(), ev->waits.begin(), ev->waits.end());
    return 0;
}

void* fakecuda_stream_mark(void* stream) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stream(key(stream)).capturing) return nullptr;
    auto* ev = new Event;
    s.arm(*ev, key(stream));
    return ev;
}

void* fakecuda_device_mark(void) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto* ev = new Event;
    ev->armed = true;  // on no stream of its own (target 0: nothing there), waiting for every stream's items
    for (auto& [handle, st] : s.streams)
        if (!st.capturing) ev->waits.push_back(Cut{handle, st.enqueued});
    return ev;
}

int fakecuda_event_wait(void* event) {
    Event* ev = as_event(event);
    if (ev == nullptr) return -1;
    State& s = state();
    {
        std::lock_guard<std::mutex> lock(s.mu);
        ++s.stats.synchronizes;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.sync_timeout_sec);
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(s.mu);
            if (s.done(*ev)) return 0;
            if (std::chrono::steady_clock::now() >= deadline) {
                ++s.stats.sync_timeouts;
                return 1;
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

void fakecuda_stream_forget(void* stream) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.streams.find(key(stream));
    if (it != s.streams.end()) it->second.waits.clear();
}

uint64_t fakecuda_stream_records(void* stream, uint64_t* while_capturing) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    Stream& st = s.stream(key(stream));
    if (while_capturing != nullptr) *while_capturing = st.records_capturing;
    return st.records;
}

}  // extern "C"

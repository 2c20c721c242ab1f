// The fake libcudart.so.13: the CUDA runtime's calls the shim intercepts (api_table.h: NCW_CUDART_HOOKED), over the
// fake libcuda's streams, events and graphs (fake_cuda.h), with the ABI's types (handles are opaque pointers, results
// ints: cudaSuccess 0, cudaErrorInvalidValue 1, cudaErrorInvalidResourceHandle 400, cudaErrorNotReady 600,
// cudaErrorStreamCaptureUnsupported 900, cudaErrorUnknown 999).
//
// - Graphs: an executable graph is its graph's handle + 1; a launch runs the graph's nodes on the calling thread and
//   answers 0, or 999 when a node failed.
// - Events (cudaEventCreate*, cudaEventDestroy) are the fake driver's. cudaEventRecord* makes the event stand for the
//   stream's work enqueued so far and for what the stream waited on (cudaStreamWaitEvent); cudaEventQuery says 0 once
//   that is complete, else 600; cudaEventSynchronize waits for it.
// - cudaStreamSynchronize waits until the stream's work enqueued before the call, and every event it waited on before
//   the call, is complete; cudaStreamQuery says whether it is (0 or 600); cudaDeviceSynchronize waits for every
//   stream's. A wait polls and blocks while a stream is held, as a GPU that does not get there; it gives up with 999
//   only after FAKE_CUDA_SYNC_TIMEOUT_SEC (default 120). On a stream under capture a synchronisation is 900.
// - cudaStreamDestroy forgets what the stream waited on.
#include <cstdint>

#include "fake_cuda.h"

extern "C" {

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kInvalidHandle = 400;
constexpr int kNotReady = 600;
constexpr int kCaptureUnsupported = 900;
constexpr int kUnknown = 999;

int instantiate(void** exec, void* graph) {
    if (exec == nullptr || graph == nullptr) return kInvalidValue;
    *exec = static_cast<char*>(graph) + 1;
    return kSuccess;
}

// A mark (fakecuda_stream_mark / _device_mark) waited for, or asked once, then freed.
int wait_mark(void* mark) {
    if (mark == nullptr) return kCaptureUnsupported;
    const int r = fakecuda_event_wait(mark);
    fakecuda_event_free(mark);
    return r == 0 ? kSuccess : kUnknown;
}
int query_mark(void* mark) {
    if (mark == nullptr) return kCaptureUnsupported;
    const int done = fakecuda_event_done(mark);
    fakecuda_event_free(mark);
    return done == 1 ? kSuccess : kNotReady;
}

int record(void* event, void* stream) { return fakecuda_event_record(event, stream) == 0 ? kSuccess : kInvalidHandle; }
int stream_wait(void* stream, void* event) {
    return fakecuda_stream_wait_event(stream, event) == 0 ? kSuccess : kInvalidHandle;
}

}  // namespace

int cudaGraphInstantiate(void** exec, void* graph, unsigned long long) { return instantiate(exec, graph); }
int cudaGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) { return instantiate(exec, graph); }
int cudaGraphInstantiateWithParams(void** exec, void* graph, void*) { return instantiate(exec, graph); }

int cudaGraphLaunch(void* exec, void*) {
    if (exec == nullptr) return kInvalidValue;
    return fakecuda_graph_run(static_cast<char*>(exec) - 1) == 0 ? kSuccess : kUnknown;
}
int cudaGraphLaunch_ptsz(void* exec, void* stream) { return cudaGraphLaunch(exec, stream); }
int cudaGraphExecDestroy(void*) { return kSuccess; }
int cudaGraphDestroy(void*) { return kSuccess; }

int cudaEventCreate(void** event) {
    if (event == nullptr) return kInvalidValue;
    *event = fakecuda_event_new();
    return kSuccess;
}
int cudaEventCreateWithFlags(void** event, unsigned int) { return cudaEventCreate(event); }
int cudaEventDestroy(void* event) { return fakecuda_event_free(event) == 0 ? kSuccess : kInvalidHandle; }

int cudaEventRecord(void* event, void* stream) { return record(event, stream); }
int cudaEventRecord_ptsz(void* event, void* stream) { return record(event, stream); }
int cudaEventRecordWithFlags(void* event, void* stream, unsigned int) { return record(event, stream); }
int cudaEventRecordWithFlags_ptsz(void* event, void* stream, unsigned int) { return record(event, stream); }

int cudaEventQuery(void* event) {
    const int done = fakecuda_event_done(event);
    return done < 0 ? kInvalidHandle : done == 1 ? kSuccess : kNotReady;
}
int cudaEventSynchronize(void* event) {
    const int r = fakecuda_event_wait(event);
    return r < 0 ? kInvalidHandle : r == 0 ? kSuccess : kUnknown;
}

int cudaStreamWaitEvent(void* stream, void* event, unsigned int) { return stream_wait(stream, event); }
int cudaStreamWaitEvent_ptsz(void* stream, void* event, unsigned int) { return stream_wait(stream, event); }

int cudaStreamSynchronize(void* stream) { return wait_mark(fakecuda_stream_mark(stream)); }
int cudaStreamSynchronize_ptsz(void* stream) { return wait_mark(fakecuda_stream_mark(stream)); }
int cudaStreamQuery(void* stream) { return query_mark(fakecuda_stream_mark(stream)); }
int cudaStreamQuery_ptsz(void* stream) { return query_mark(fakecuda_stream_mark(stream)); }
int cudaDeviceSynchronize() { return wait_mark(fakecuda_device_mark()); }

int cudaStreamDestroy(void* stream) {
    fakecuda_stream_forget(stream);
    return kSuccess;
}

}  // extern "C"

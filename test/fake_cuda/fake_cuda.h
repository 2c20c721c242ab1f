// The test-facing API of the fake libcuda.so.1 (fake_cuda.cpp). A test double for the few CUDA driver functions
// the shim's GPU completion tracking calls (shim/base/cuda_driver.cpp), over streams that are nothing but counters:
//
//   - A stream is any handle value, 0 included. Each has `enqueued` and `completed` work counts. The fake NCCL
//     enqueues one item (its "kernel") per operation with fakecuda_enqueue; the framework may enqueue "compute".
//   - Work completes at once, unless the stream is held: by fakecuda_hold, or for every stream while the file named
//     by FAKE_CUDA_HOLD_FILE exists. Items enqueued before a hold began are complete already; on release everything
//     enqueued completes. While that file holds a number N, every stream held by it completes its first N items
//     (counted from the stream's first enqueue; never fewer than it had completed): a GPU that finished up to there
//     and sits in item N + 1.
//   - cuEventRecord(ev, s) remembers (s, enqueued(s) now); cuEventQuery says CUDA_SUCCESS once completed(s) reaches
//     that, else CUDA_ERROR_NOT_READY. An event never recorded is complete, as in CUDA.
//   - A stream that waited on an event (fakecuda_stream_wait_event: the runtime's cudaStreamWaitEvent) carries what
//     the event stood for: an event recorded on it later, and a synchronisation of it, are complete only once that
//     is too (its own items still complete as above: the fake has no work that waits on the GPU).
//   - A stream flagged with fakecuda_set_capturing is under graph capture: cuStreamIsCapturing says ACTIVE, work
//     enqueued on it does not run (it is counted as captured), and an event recorded on it joins the "graph": it is
//     counted, and not armed (querying it says CUDA_SUCCESS). While any stream is capturing, cuEventQuery from a
//     thread whose capture mode is GLOBAL (every thread's mode until cuThreadExchangeStreamCaptureMode) fails with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and counts a capture violation, as a capture in global mode forbids it.
//
//   - A capture builds a graph (one per fakecuda_set_capturing(s, 1)): cuStreamGetCaptureInfo_v2 names it while the
//     stream captures, fakecuda_last_capture once the capture ended. The fake NCCL adds each op issued into a
//     capture as a node (fakecuda_capture_node) instead of running it; fakecuda_graph_run runs the nodes in order, on
//     the calling thread (the fake libcudart.so.13's cudaGraphLaunch: fake_cudart.cpp).
//
//   - The fake libcudart.so.13 (fake_cudart.cpp) builds the runtime's events, stream waits and synchronisations on
//     these: fakecuda_event_new / _record / _done, fakecuda_stream_mark (what a cudaStreamSynchronize waits for: the
//     stream's items so far and what it waited on), fakecuda_device_mark (every stream's), and fakecuda_event_wait,
//     which polls until an event is complete (a held stream blocks it like a GPU) and gives up only after
//     FAKE_CUDA_SYNC_TIMEOUT_SEC (default 120, fractions allowed).
//
// Thread-safe (one mutex). FAKE_CUDA_NO_PROC_ADDRESS=1 makes cuGetProcAddress find nothing, so that a caller must
// fall back to dlsym of the versioned names. FAKE_CUDA_HOLD_ALL=1 holds every stream from its first use (a GPU that
// never catches up: what a benchmark of CPU run-ahead needs, without the hold file's look-up on every call).
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct FakeCudaStats {
    uint64_t event_records;            // cuEventRecord calls that succeeded, on any stream
    uint64_t records_while_capturing;  // of which on a stream under capture
    uint64_t event_queries;            // cuEventQuery calls
    uint64_t capture_violations;       // cuEventQuery from a GLOBAL-mode thread while a stream was capturing
    uint64_t capture_checks_active;    // cuStreamIsCapturing calls that said ACTIVE, from a RELAXED-mode thread
    uint64_t events_created;
    uint64_t enqueued;            // items enqueued on streams not under capture
    uint64_t captured;            // items enqueued on streams under capture (they never run)
    uint64_t streams;             // distinct stream handles seen
    uint64_t proc_address_found;  // cuGetProcAddress lookups that found the function
    // The runtime's calls (fake_cudart.cpp), apart from the driver's counts above.
    uint64_t runtime_records;  // cudaEventRecord* calls that succeeded
    uint64_t stream_waits;     // cudaStreamWaitEvent calls that succeeded
    uint64_t synchronizes;     // fakecuda_event_wait calls (cudaStreamSynchronize, cudaEventSynchronize, ...)
    uint64_t sync_timeouts;    // of which gave up after FAKE_CUDA_SYNC_TIMEOUT_SEC
};

// What the fake NCCL calls once per operation, where a real NCCL launches its kernel.
void fakecuda_enqueue(void* stream);
// Holds (1) or releases (0) one stream; releasing completes everything enqueued on it.
void fakecuda_hold(void* stream, int held);
// Starts (1) or ends (0) a graph capture on one stream.
void fakecuda_set_capturing(void* stream, int capturing);
// Adds a node to the graph `stream`'s capture builds: 1, or 0 when the stream is not capturing. `fn(arg)` runs at
// each launch of the graph and returns 0 on success.
int fakecuda_capture_node(void* stream, int (*fn)(void*), void* arg);
// The graph of the stream's last capture that ended (nullptr: none).
void* fakecuda_last_capture(void* stream);
// Runs the graph's nodes in order; the first one's non-zero result, else 0 (1: no such graph).
int fakecuda_graph_run(void* graph);
void fakecuda_stats(struct FakeCudaStats* out);

// The runtime's side (fake_cudart.cpp). Events are the driver's (a cudaEvent_t is a CUevent), made without a context.
void* fakecuda_event_new(void);
// 0, or 1: not an event.
int fakecuda_event_free(void* event);
// As cuEventRecord, counted as the runtime's: 0, or 1 (not an event). The event also stands for what the stream
// waited on.
int fakecuda_event_record(void* event, void* stream);
// 1: complete (or never recorded), 0: not yet, -1: not an event.
int fakecuda_event_done(void* event);
// The stream waits on what the event stands for now: 0, or 1 (not an event).
int fakecuda_stream_wait_event(void* stream, void* event);
// An event (free it with fakecuda_event_free) that stands for the stream's items so far and what it waited on;
// nullptr while the stream is capturing (a synchronisation there is illegal).
void* fakecuda_stream_mark(void* stream);
// One that stands for every stream's items so far (cudaDeviceSynchronize).
void* fakecuda_device_mark(void);
// Polls (200 us apart) until the event is complete: 0, 1 when FAKE_CUDA_SYNC_TIMEOUT_SEC passed first, -1 not an event.
int fakecuda_event_wait(void* event);
// cudaStreamDestroy: the stream forgets what it waited on (its handle may be another stream's next).
void fakecuda_stream_forget(void* stream);
// Event records on one stream, in all and while it was capturing.
uint64_t fakecuda_stream_records(void* stream, uint64_t* while_capturing);

#ifdef __cplusplus
}
#endif

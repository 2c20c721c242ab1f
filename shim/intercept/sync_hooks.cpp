// The CUDA runtime's synchronisations, event records and stream waits (api_table.h: NCW_CUDART_HOOKED), whose
// success proves NCCL's ops complete (shim/record/sync_proofs.h). Each hook calls the real function exactly once and
// returns its result; what it notes costs a clock read and a few stores, and nothing at all before the first
// communicator, or for a stream that never carried an NCCL op or waited on one.
#include "shim/base/clock.h"
#include "shim/intercept/cudart_real.h"
#include "shim/intercept/hooks.h"
#include "shim/record/sync_proofs.h"

namespace ncw {

namespace {

constexpr int kCudaSuccess = 0;

uintptr_t key(const void* handle) { return reinterpret_cast<uintptr_t>(handle); }

// The proofs when there may be any: after the runtime started, and once an NCCL op was seen on some stream.
SyncProofs* active() {
    SyncProofs* sp = sync_proofs();
    return sp && sp->any_nccl_stream() ? sp : nullptr;
}

template <typename Fn, typename... A>
int forward(CudartFn& fn, A... a) {
    Fn real = real_of<Fn>(fn);
    return real ? real(a...) : kCudaErrorUnknown;
}

// cudaStreamSynchronize / cudaStreamQuery: done, the stream's ops and what it waited on are complete.
int stream_done(CudartFn& fn, cudaStream_t stream) {
    using Fn = int (*)(cudaStream_t);
    Fn real = real_of<Fn>(fn);
    if (!real) return kCudaErrorUnknown;
    SyncProofs* sp = active();
    if (!sp) return real(stream);
    CallScope scope;
    SyncCutSet cuts;
    // Inside an open NCCL group the thread's ops are enqueued only at its ncclGroupEnd: they do not count.
    const bool any = sp->cuts_of_stream(key(stream), scope.tid(), now_mono_ns(), cuts, scope.ts().group_depth == 0);
    scope.restore_errno();
    const int r = real(stream);
    if (r == kCudaSuccess && any) {
        ErrnoKeeper keep;
        sp->proven(cuts);
    }
    return r;
}

// cudaEventSynchronize / cudaEventQuery: done, what the event's last record stands for is complete.
int event_done(CudartFn& fn, void* event) {
    using Fn = int (*)(void*);
    Fn real = real_of<Fn>(fn);
    if (!real) return kCudaErrorUnknown;
    SyncProofs* sp = active();
    if (!sp) return real(event);
    SyncCutSet cuts;
    bool any;
    {
        ErrnoKeeper keep;
        any = sp->cuts_of_event(key(event), cuts);
    }
    const int r = real(event);
    if (r == kCudaSuccess && any) {
        ErrnoKeeper keep;
        sp->proven(cuts);
    }
    return r;
}

// cudaEventRecord and its variants: the event now stands for what its stream holds so far.
template <typename Fn, typename... A>
int event_record(CudartFn& fn, void* event, cudaStream_t stream, A... more) {
    Fn real = real_of<Fn>(fn);
    if (!real) return kCudaErrorUnknown;
    SyncProofs* sp = active();
    if (!sp) return real(event, stream, more...);
    CallScope scope;
    const uint32_t tid = scope.tid();
    const bool own = scope.ts().group_depth == 0;  // see stream_done
    const uint64_t now = now_mono_ns();
    scope.restore_errno();
    const int r = real(event, stream, more...);
    if (r == kCudaSuccess) {
        ErrnoKeeper keep;
        sp->event_recorded(key(event), key(stream), tid, now, own);
    }
    return r;
}

template <typename Fn>
int stream_wait(CudartFn& fn, cudaStream_t stream, void* event, unsigned int flags) {
    Fn real = real_of<Fn>(fn);
    if (!real) return kCudaErrorUnknown;
    const int r = real(stream, event, flags);
    SyncProofs* sp = r == kCudaSuccess ? active() : nullptr;
    if (sp) {
        ErrnoKeeper keep;
        sp->stream_waits(key(stream), key(event));
    }
    return r;
}

}  // namespace

namespace cudart_hook {

int cudaStreamSynchronize(cudaStream_t stream) { return stream_done(real_cudart::cudaStreamSynchronize, stream); }
int cudaStreamSynchronize_ptsz(cudaStream_t stream) {
    return stream_done(real_cudart::cudaStreamSynchronize_ptsz, stream);
}
int cudaStreamQuery(cudaStream_t stream) { return stream_done(real_cudart::cudaStreamQuery, stream); }
int cudaStreamQuery_ptsz(cudaStream_t stream) { return stream_done(real_cudart::cudaStreamQuery_ptsz, stream); }
int cudaEventSynchronize(void* event) { return event_done(real_cudart::cudaEventSynchronize, event); }
int cudaEventQuery(void* event) { return event_done(real_cudart::cudaEventQuery, event); }

// Every stream's work enqueued before it (this thread's ops: SyncCut).
int cudaDeviceSynchronize() {
    using Fn = int (*)();
    Fn real = real_of<Fn>(real_cudart::cudaDeviceSynchronize);
    if (!real) return kCudaErrorUnknown;
    SyncProofs* sp = active();
    if (!sp) return real();
    CallScope scope;
    SyncCutSet cuts;
    cuts.add(SyncCut{kAnyStream, scope.tid(), now_mono_ns()});
    const bool own = scope.ts().group_depth == 0;  // see stream_done
    scope.restore_errno();
    const int r = real();
    if (r == kCudaSuccess && own) {
        ErrnoKeeper keep;
        sp->proven(cuts);
    }
    return r;
}

int cudaEventRecord(void* event, cudaStream_t stream) {
    return event_record<int (*)(void*, cudaStream_t)>(real_cudart::cudaEventRecord, event, stream);
}
int cudaEventRecord_ptsz(void* event, cudaStream_t stream) {
    return event_record<int (*)(void*, cudaStream_t)>(real_cudart::cudaEventRecord_ptsz, event, stream);
}
int cudaEventRecordWithFlags(void* event, cudaStream_t stream, unsigned int flags) {
    return event_record<int (*)(void*, cudaStream_t, unsigned int)>(real_cudart::cudaEventRecordWithFlags, event,
                                                                    stream, flags);
}
int cudaEventRecordWithFlags_ptsz(void* event, cudaStream_t stream, unsigned int flags) {
    return event_record<int (*)(void*, cudaStream_t, unsigned int)>(real_cudart::cudaEventRecordWithFlags_ptsz, event,
                                                                    stream, flags);
}

int cudaStreamWaitEvent(cudaStream_t stream, void* event, unsigned int flags) {
    return stream_wait<int (*)(cudaStream_t, void*, unsigned int)>(real_cudart::cudaStreamWaitEvent, stream, event,
                                                                   flags);
}
int cudaStreamWaitEvent_ptsz(cudaStream_t stream, void* event, unsigned int flags) {
    return stream_wait<int (*)(cudaStream_t, void*, unsigned int)>(real_cudart::cudaStreamWaitEvent_ptsz, stream, event,
                                                                   flags);
}

// Forgotten before the real call: the handle may be another stream's once it returns.
int cudaStreamDestroy(cudaStream_t stream) {
    if (SyncProofs* sp = sync_proofs()) {
        ErrnoKeeper keep;
        sp->stream_destroyed(key(stream));
    }
    return forward<int (*)(cudaStream_t)>(real_cudart::cudaStreamDestroy, stream);
}

}  // namespace cudart_hook

}  // namespace ncw

// What the host's own synchronisations prove about NCCL's ops (issue 42). When cudaStreamSynchronize,
// cudaEventSynchronize or cudaDeviceSynchronize returns, or cudaStreamQuery / cudaEventQuery says "done", every GPU
// op it waited on has completed: the ops of its stream, and, through the events recorded on other streams that its
// stream waited for (cudaEventRecord, then cudaStreamWaitEvent), theirs. That is how torch's `.item()`, `.cpu()`,
// `work.wait()` and its watchdog's event queries wait for a collective, which runs on torch's NCCL stream: proof of
// its completion whether NCCL's profiler gave any event for it or not.
//
// What is kept, all of it fixed tables written by the calling threads with plain stores under a per-entry seqlock
// (no lock, no allocation, no syscall: these calls are the training thread's):
// - per event, the cuts its last record stands for (SyncCut: "the ops issued on stream S by thread T before time t");
// - per stream, the cuts of the events it waited for since it was created;
// - the proofs: the cuts of each synchronisation that returned, queued for the completion poller, which finds the ops
//   behind each cut in the ring (shim/complete/sync_apply.cpp) and completes them.
// An entry another thread is writing at the same moment is dropped (a lost proof, never a false one), and so is a
// proof that finds the queue full. A cut names the recording thread: its ops' calls returned before the cut's time (the
// program's order), so they were enqueued before the event or the synchronisation; another thread's op issued at that
// moment may not have been, and is left out.
#pragma once

#include <atomic>
#include <cstdint>

#include "shim/base/mpmc_queue.h"

namespace ncw {

struct SyncCut {
    uintptr_t stream = 0;  // the stream's handle; kAnyStream: every stream (a device synchronisation)
    uint32_t tid = 0;      // the thread whose ops count (its calls returned before t_ns)
    uint64_t t_ns = 0;     // CLOCK_MONOTONIC, as the ring records' issue times
};
inline constexpr uintptr_t kAnyStream = ~uintptr_t(0);

struct SyncCutSet {
    static constexpr int kMax = 4;
    int n = 0;
    SyncCut cut[kMax];
    // Adds `c`, or raises the time of the cut of the same stream and thread; a full set keeps its newest cuts.
    void add(const SyncCut& c);
    void add(const SyncCutSet& s) {
        for (int i = 0; i < s.n; ++i) add(s.cut[i]);
    }
};

// The calling threads' side (the CUDA runtime hooks: shim/intercept/sync_hooks.cpp) and the poller's.
class SyncProofs {
public:
    static constexpr int kEvents = 1024;  // power of two: events recorded on (or after) an NCCL stream
    static constexpr int kStreams = 256;  // power of two: streams that waited on such an event
    static constexpr int kNcclStreams = 32;
    static constexpr size_t kQueue = 256;

    // Whether a stream ever carried an NCCL op (the poller registers them as its ring scan meets them): the one test
    // an unrelated event record or stream wait pays.
    bool is_nccl_stream(uintptr_t stream) const;
    void note_nccl_stream(uintptr_t stream);  // the completion poller's thread
    bool any_nccl_stream() const { return nccl_streams_n_.load(std::memory_order_relaxed) != 0; }

    // cudaEventRecord(event, stream) succeeded (`now`: our clock before it). `own`: the thread's ops on the stream
    // count (false inside an open NCCL group: its ops are enqueued only at its ncclGroupEnd).
    void event_recorded(uintptr_t event, uintptr_t stream, uint32_t tid, uint64_t now, bool own = true);
    // cudaStreamWaitEvent(stream, event): the stream now waits on whatever the event stands for.
    void stream_waits(uintptr_t stream, uintptr_t event);
    // cudaStreamDestroy: its handle may be another stream's next.
    void stream_destroyed(uintptr_t stream);

    // The cuts a synchronisation of the stream (or of the event) would prove, taken at its start; false: none.
    bool cuts_of_stream(uintptr_t stream, uint32_t tid, uint64_t now, SyncCutSet& out, bool own = true) const;
    bool cuts_of_event(uintptr_t event, SyncCutSet& out) const;
    // The synchronisation returned success: its cuts are proven. A thread's proof equal to its previous one is not
    // queued again (torch's watchdog queries the same event over and over).
    void proven(const SyncCutSet& cuts);

    // The poller's: the next proof (false: none).
    bool pop(SyncCutSet& out);

    uint64_t proofs_queued() const { return queued_.load(std::memory_order_relaxed); }
    uint64_t proofs_dropped() const { return dropped_.load(std::memory_order_relaxed); }

private:
    struct Entry {
        std::atomic<uint32_t> seq{0};  // odd while written
        std::atomic<uintptr_t> key{0};
        SyncCutSet cuts;
    };
    static bool read(const Entry& e, uintptr_t key, SyncCutSet& out);
    // Claims the entry for `key` (false: another thread writes it now); release() publishes it.
    static bool claim(Entry& e);
    static void release(Entry& e) { e.seq.fetch_add(1, std::memory_order_release); }

    Entry events_[kEvents];
    Entry streams_[kStreams];
    std::atomic<uintptr_t> nccl_streams_[kNcclStreams] = {};
    std::atomic<int> nccl_streams_n_{0};
    MpmcQueue<SyncCutSet> queue_{kQueue};
    std::atomic<uint64_t> queued_{0};
    std::atomic<uint64_t> dropped_{0};
};

// nullptr until the runtime starts (sync_proofs_start, startup.cpp: there are no ops to prove before it).
SyncProofs* sync_proofs();
void sync_proofs_start();

}  // namespace ncw

// The tables behind the host synchronisations' proofs (see sync_proofs.h).
#include "shim/record/sync_proofs.h"

namespace ncw {

namespace {

// Handles are pointers: drop the low bits that are the same in every one, then mix.
uint32_t slot_of(uintptr_t key, int size) {
    uint64_t h = uint64_t(key) >> 4;
    h ^= h >> 17;
    h *= 0xed5ad4bbu;
    h ^= h >> 11;
    return uint32_t(h) & uint32_t(size - 1);
}

bool same(const SyncCutSet& a, const SyncCutSet& b) {
    if (a.n != b.n) return false;
    for (int i = 0; i < a.n; ++i)
        if (a.cut[i].stream != b.cut[i].stream || a.cut[i].tid != b.cut[i].tid || a.cut[i].t_ns != b.cut[i].t_ns)
            return false;
    return true;
}

// The proof this thread queued last (initial-exec: no __tls_get_addr on these calls).
thread_local SyncCutSet tl_last_proof __attribute__((tls_model("initial-exec")));

}  // namespace

void SyncCutSet::add(const SyncCut& c) {
    for (int i = 0; i < n; ++i)
        if (cut[i].stream == c.stream && cut[i].tid == c.tid) {
            if (c.t_ns > cut[i].t_ns) cut[i].t_ns = c.t_ns;
            return;
        }
    if (n < kMax) {
        cut[n++] = c;
        return;
    }
    int oldest = 0;
    for (int i = 1; i < n; ++i)
        if (cut[i].t_ns < cut[oldest].t_ns) oldest = i;
    if (c.t_ns > cut[oldest].t_ns) cut[oldest] = c;
}

bool SyncProofs::is_nccl_stream(uintptr_t stream) const {
    const int n = nccl_streams_n_.load(std::memory_order_acquire);
    for (int i = 0; i < n && i < kNcclStreams; ++i)
        if (nccl_streams_[i].load(std::memory_order_relaxed) == stream) return true;
    return false;
}

void SyncProofs::note_nccl_stream(uintptr_t stream) {
    if (is_nccl_stream(stream)) return;
    const int n = nccl_streams_n_.load(std::memory_order_relaxed);
    if (n >= kNcclStreams) return;  // more NCCL streams than this: the newest ones prove nothing
    nccl_streams_[n].store(stream, std::memory_order_relaxed);
    nccl_streams_n_.store(n + 1, std::memory_order_release);  // one writer: the poller
}

bool SyncProofs::claim(Entry& e) {
    uint32_t s = e.seq.load(std::memory_order_relaxed);
    if (s & 1) return false;
    if (!e.seq.compare_exchange_strong(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) return false;
    std::atomic_thread_fence(std::memory_order_release);
    return true;
}

bool SyncProofs::read(const Entry& e, uintptr_t key, SyncCutSet& out) {
    const uint32_t s = e.seq.load(std::memory_order_acquire);
    if (s & 1 || e.key.load(std::memory_order_relaxed) != key) return false;
    SyncCutSet copy = e.cuts;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != s) return false;
    out.add(copy);
    return true;
}

void SyncProofs::event_recorded(uintptr_t event, uintptr_t stream, uint32_t tid, uint64_t now, bool own) {
    Entry& e = events_[slot_of(event, kEvents)];
    SyncCutSet cuts;
    if (own && is_nccl_stream(stream)) cuts.add(SyncCut{stream, tid, now});
    Entry& deps = streams_[slot_of(stream, kStreams)];
    read(deps, stream, cuts);  // what its stream waited for stands behind the event too
    if (cuts.n == 0) {
        // Re-recorded where it stands for no NCCL op: what it stood for before is no longer what it waits for.
        if (e.key.load(std::memory_order_relaxed) == event && claim(e)) {
            e.key.store(0, std::memory_order_relaxed);
            release(e);
        }
        return;
    }
    if (!claim(e)) return;
    e.key.store(event, std::memory_order_relaxed);
    e.cuts = cuts;
    release(e);
}

void SyncProofs::stream_waits(uintptr_t stream, uintptr_t event) {
    SyncCutSet cuts;
    if (!read(events_[slot_of(event, kEvents)], event, cuts)) return;
    Entry& e = streams_[slot_of(stream, kStreams)];
    if (!claim(e)) return;
    if (e.key.load(std::memory_order_relaxed) != stream) {
        e.key.store(stream, std::memory_order_relaxed);
        e.cuts = SyncCutSet{};
    }
    e.cuts.add(cuts);
    release(e);
}

void SyncProofs::stream_destroyed(uintptr_t stream) {
    Entry& e = streams_[slot_of(stream, kStreams)];
    if (e.key.load(std::memory_order_relaxed) != stream) return;
    if (claim(e)) {
        e.key.store(0, std::memory_order_relaxed);
        release(e);
    } else {
        e.key.store(0, std::memory_order_relaxed);  // its writer may put it back: a lost entry, as a dropped one
    }
}

bool SyncProofs::cuts_of_stream(uintptr_t stream, uint32_t tid, uint64_t now, SyncCutSet& out, bool own) const {
    out = SyncCutSet{};
    if (own && is_nccl_stream(stream)) out.add(SyncCut{stream, tid, now});
    read(streams_[slot_of(stream, kStreams)], stream, out);
    return out.n > 0;
}

bool SyncProofs::cuts_of_event(uintptr_t event, SyncCutSet& out) const {
    out = SyncCutSet{};
    return read(events_[slot_of(event, kEvents)], event, out) && out.n > 0;
}

void SyncProofs::proven(const SyncCutSet& cuts) {
    if (cuts.n == 0 || same(cuts, tl_last_proof)) return;
    if (!queue_.try_push(cuts)) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    tl_last_proof = cuts;
    queued_.fetch_add(1, std::memory_order_relaxed);
}

bool SyncProofs::pop(SyncCutSet& out) { return queue_.try_pop(out); }

namespace {
std::atomic<SyncProofs*> g_proofs{nullptr};
}

SyncProofs* sync_proofs() { return g_proofs.load(std::memory_order_acquire); }

void sync_proofs_start() {
    if (g_proofs.load(std::memory_order_acquire)) return;
    auto* p = new SyncProofs;  // never freed: the hooks may run during static destruction
    SyncProofs* none = nullptr;
    if (!g_proofs.compare_exchange_strong(none, p, std::memory_order_acq_rel)) delete p;
}

}  // namespace ncw

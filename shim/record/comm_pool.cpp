// The reuse of destroyed communicators' runtimes (comm_pool.h).
#include "shim/record/comm_pool.h"

#include "shim/base/log.h"

namespace ncw {

bool CommPool::ready(Retired& r) {
    const CommRuntime& cr = *r.cr;
    // Seen none under way since the retirement: the ones under way then are over.
    if (r.host_walk && host_walks_.load() != 0) return false;
    r.host_walk = false;
    for (int i = 0; i < kReaders; ++i) {
        if (!passes_[i]) continue;
        const uint64_t m = r.marks[i];
        const uint64_t n = passes_[i]->n.load();
        if (i == kPoller) {
            // A pass that began after the mark and ended: it took what was queued before (m odd: the pass under
            // way may have emptied the queue before the last events went in).
            if (n < m + 2 + (m & 1)) return false;
        } else if ((m & 1) && n == m) {
            return false;  // in the pass it was in at the retirement, which may hold the pointer
        }
    }
    // Read after the counters: a hold taken inside a pass is visible once that pass is seen over.
    return cr.holds.load() == 0 && cr.prof.load() == nullptr;
}

void CommPool::drop(uint32_t i) {
    for (; i + 1 < n_; ++i) waiting_[i] = waiting_[i + 1];
    --n_;
    waiting_n_.store(n_, std::memory_order_relaxed);
}

CommRuntime* CommPool::take(SlotTable& slots) {
    CommRuntime* cr = nullptr;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (uint32_t i = 0; i < n_ && !cr; ++i) {
            if (!ready(waiting_[i]) || slots.refers_to(waiting_[i].cr)) continue;
            cr = waiting_[i].cr;
            drop(i);
        }
    }
    if (cr) {
        cr->renew();  // ours alone now
        reused_.fetch_add(1, std::memory_order_relaxed);
        return cr;
    }
    cr = new CommRuntime;
    made_.fetch_add(1, std::memory_order_relaxed);
    return cr;
}

void CommPool::retire(CommRuntime& cr, SlotTable& slots) {
    slots.forget(&cr);
    // The registry and the list let go of it before the counters are read: a pass that begins after its mark cannot
    // find it (the passes enter with a locked increment; this is the other side of that store-load pair).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    Retired r;
    r.cr = &cr;
    for (int i = 0; i < kReaders; ++i) r.marks[i] = passes_[i] ? passes_[i]->n.load() : 0;
    r.host_walk = host_walks_.load() != 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (n_ == kQuarantine) {
        drop(0);
        if (let_go_.fetch_add(1, std::memory_order_relaxed) == 0)
            log().debug(
                "more than {} destroyed communicators wait for a thread of ours to let go of them: the oldest is "
                "kept allocated instead of reused",
                kQuarantine);
    }
    waiting_[n_++] = r;
    waiting_n_.store(n_, std::memory_order_relaxed);
}

}  // namespace ncw

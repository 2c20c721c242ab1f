#include "shim/record/comm_slots.h"

#include <cstddef>
#include <cstring>

#include "shim/record/comm_registry.h"

namespace ncw {

void SlotTable::bind(disk::CommSlot* table, uint32_t capacity, std::atomic<uint32_t>* num_comms,
                     std::atomic<uint64_t>* unslotted) {
    std::lock_guard<std::mutex> lock(mu_);
    table_ = table;
    capacity_ = capacity < disk::kMaxComms ? capacity : disk::kMaxComms;
    num_comms_ = num_comms;
    unslotted_ = unslotted;
}

bool SlotTable::quiet_since(const Entry& e) const {
    for (int i = 0; i < kPassCounters; ++i) {
        if (!passes_[i]) continue;
        // Odd at the detach: that pass may still hold the old pointer until the counter moves on.
        if ((e.marks[i] & 1) && passes_[i]->n.load() == e.marks[i]) return false;
    }
    return true;
}

void SlotTable::detach(Entry& e, uint32_t index) {
    CommRuntime& cr = *e.released;
    // The private copy keeps the counters our threads compare against (a stall reported before the destroy). It is
    // the runtime's own block, which goes with it to its later lives (comm_pool.h): one per object, not per detach.
    if (!cr.own_slot) cr.own_slot = new disk::CommSlot();
    memcpy(static_cast<void*>(cr.own_slot), static_cast<const void*>(&table_[index]), sizeof(disk::CommSlot));
    cr.slot.store(cr.own_slot);  // seq_cst: ordered before the pass counters are read below
    for (int i = 0; i < kPassCounters; ++i) e.marks[i] = passes_[i] ? passes_[i]->n.load() : 0;
    e.released = nullptr;
}

disk::CommSlot* SlotTable::acquire(CommRuntime* owner, uint16_t& index) {
    index = 0xffff;
    std::lock_guard<std::mutex> lock(mu_);
    if (!table_) return nullptr;
    uint32_t pick = capacity_;
    if (used_ < capacity_) {
        pick = used_++;
    } else {
        // The least recently released first; a slot whose old owner a pass of ours may still hold is passed over
        // and the next one tried (a few at most).
        uint64_t after = 0;
        for (int tries = 0; tries < 3 && pick >= capacity_; ++tries) {
            const uint32_t cand =
                least_recently_released([&](const Entry& e) { return !e.owner && e.released_order > after; });
            if (cand >= capacity_) break;
            after = entries_[cand].released_order;
            if (entries_[cand].released) detach(entries_[cand], cand);
            // Never waited for: the caller is the host's thread inside its communicator init.
            if (quiet_since(entries_[cand])) pick = cand;
        }
    }
    if (pick >= capacity_) {
        overflowed_.fetch_add(1, std::memory_order_relaxed);
        // In the file, so that a reader after the job knows how many communicators it cannot show from the table.
        if (unslotted_) unslotted_->fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    entries_[pick].owner = owner;
    disk::CommSlot& s = table_[pick];
    rewrite(s);
    index = uint16_t(pick);
    // Two threads may init communicators at once (one per GPU): the count only grows.
    uint32_t n = num_comms_->load(std::memory_order_relaxed);
    while (n < pick + 1 && !num_comms_->compare_exchange_weak(n, pick + 1, std::memory_order_release)) {
    }
    return &s;
}

void SlotTable::rewrite(disk::CommSlot& s) {
    // Odd first: a reader copying the slot now sees the generation change and drops its copy.
    const uint64_t g = s.generation.load(std::memory_order_relaxed);
    s.generation.store(g | 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    auto* bytes = reinterpret_cast<unsigned char*>(&s);
    const size_t gen_at = offsetof(disk::CommSlot, generation);
    const size_t after = gen_at + sizeof(s.generation);
    memset(bytes, 0, gen_at);
    memset(bytes + after, 0, sizeof(disk::CommSlot) - after);
}

void SlotTable::publish(disk::CommSlot& s) {
    const uint64_t g = s.generation.load(std::memory_order_relaxed);
    s.generation.store((g | 1) + 1, std::memory_order_release);
}

void SlotTable::release(CommRuntime& cr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cr.slot_index >= capacity_ || entries_[cr.slot_index].owner != &cr) return;
    Entry& e = entries_[cr.slot_index];
    e.released = &cr;
    e.released_order = ++order_;
    e.owner = nullptr;
    // Those released longer ago are detached now, ahead of their reuse: long since done writing, and by the time an
    // init needs one, the passes of ours that were under way here have ended. (Detached only at the reuse, a slot is
    // never quiet during one long pass: a churn of communicators through one watchdog poll overflowed them all.)
    uint32_t attached = 0;
    for (uint32_t i = 0; i < capacity_; ++i) attached += entries_[i].released != nullptr;
    while (attached-- > kAttachedAfterRelease) {
        const uint32_t oldest = least_recently_released([](const Entry& x) { return x.released != nullptr; });
        detach(entries_[oldest], oldest);
    }
}

bool SlotTable::refers_to(const CommRuntime* cr) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < capacity_; ++i)
        if (entries_[i].owner == cr || entries_[i].released == cr) return true;
    const uint32_t n = unslotted_n_.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i)
        if (unslotted_list_[i].load(std::memory_order_relaxed) == cr) return true;
    return false;
}

void SlotTable::forget(const CommRuntime* cr) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t n = unslotted_n_.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i)
        if (unslotted_list_[i].load(std::memory_order_relaxed) == cr)
            unslotted_list_[i].store(nullptr, std::memory_order_release);
}

bool SlotTable::add_unslotted(CommRuntime* cr) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t n = unslotted_n_.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
        CommRuntime* old = unslotted_list_[i].load(std::memory_order_relaxed);
        const disk::CommSlot* s = old ? old->slot.load() : nullptr;
        // A reader that still holds the old pointer reads a destroyed communicator and skips it (its runtime is
        // reused only once no read of ours that may hold it is under way: comm_pool.h).
        if (!old || old->destroyed.load(std::memory_order_acquire) ||
            (s && s->state.load(std::memory_order_relaxed) == uint32_t(disk::CommState::InitFailed))) {
            unslotted_list_[i].store(cr, std::memory_order_release);
            return true;
        }
    }
    if (n >= kMaxUnslotted) return false;
    unslotted_list_[n].store(cr, std::memory_order_release);
    unslotted_n_.store(n + 1, std::memory_order_release);
    return true;
}

}  // namespace ncw

// Which slot of the rank file's comm table each communicator holds. The table has a fixed size (readers map it at a
// fixed place), so slots of destroyed communicators are reused; a communicator that finds none free is watched in a
// slot of our own in memory ("overflow": the watchdog sees it, readers of the file see its ring records only).
//
// Reuse, in order: destroy (the state written, the last followers settled) → the slot keeps receiving that
// communicator's late writes (the completion poller finishing its last events) while it stays in the file → a later
// init needs it (never-used slots go first, then the least recently destroyed: a destroyed communicator's final state
// stays on disk as long as possible), or more than kAttachedAfterRelease were destroyed after it → detach: the old
// CommRuntime gets a private copy to write into from then on (its own_slot, kept across its lives) →
// every thread of ours that may hold slot pointers during a pass (the completion poller, the watchdog) was idle at the
// detach or has finished that pass (the init never waits: it tries another slot) → the slot is
// rewritten for the new communicator under its generation seqlock (format.h CommSlot::generation).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "ncclwatch/format.h"

namespace ncw {

struct CommRuntime;

// A thread of ours that holds comm slot pointers only inside a pass: odd while in one.
struct PassCounter {
    std::atomic<uint64_t> n{0};
    void enter() { n.fetch_add(1); }
    void leave() { n.fetch_add(1); }
};

// One pass, from here to the end of the scope or to leave() (nullptr: nothing counted).
class PassScope {
public:
    explicit PassScope(PassCounter* c) : c_(c) {
        if (c_) c_->enter();
    }
    ~PassScope() { leave(); }
    void leave() {
        if (c_) c_->leave();
        c_ = nullptr;
    }
    PassScope(const PassScope&) = delete;
    PassScope& operator=(const PassScope&) = delete;

private:
    PassCounter* c_;
};

class SlotTable {
public:
    static constexpr int kPassCounters = 2;  // the completion poller's and the watchdog's
    // Released slots that keep taking their communicator's late writes; older ones are detached at the next release.
    static constexpr uint32_t kAttachedAfterRelease = 8;

    // table: the file's comm table of `capacity` slots; num_comms: the header's high-water mark; unslotted: the
    // header's count of communicators that got no slot (format 1.5, FileHeader::comms_unslotted).
    void bind(disk::CommSlot* table, uint32_t capacity, std::atomic<uint32_t>* num_comms,
              std::atomic<uint64_t>* unslotted = nullptr);
    void watch_passes(int i, const PassCounter* c) { passes_[i] = c; }

    // At init (the host's thread, once per communicator): a slot rewritten empty under its seqlock and left odd
    // (publish() ends the rewrite), with its index; nullptr when none can be had (index 0xffff).
    disk::CommSlot* acquire(CommRuntime* owner, uint16_t& index);
    // Ends the rewrite that acquire began: the identity written, readers may copy the slot.
    static void publish(disk::CommSlot& s);
    // Begins a rewrite: the generation odd (a reader copying it now drops its copy), everything else zero. acquire's
    // for a file slot; begin_comm's for a progress block of our own that a reused CommRuntime brings (comm_pool.h).
    static void rewrite(disk::CommSlot& s);
    // At destroy or abort, after the state is written and the settle: the file's slot keeps the final state (and
    // takes cr's late writes) until a later communicator needs it.
    void release(CommRuntime& cr);

    uint32_t overflowed() const { return overflowed_.load(std::memory_order_relaxed); }

    // Whether the table still refers to cr: it owns a slot, or released one it still writes into (not detached yet),
    // or it is in the list of communicators without a slot. A CommRuntime is reused only once it does not
    // (comm_pool.h), since a detach writes into it. Init and destroy only (under mu_).
    bool refers_to(const CommRuntime* cr);
    // cr is destroyed and its runtime retired: out of the list of communicators without a slot, so that no reader
    // finds it there once it serves a later communicator.
    void forget(const CommRuntime* cr);

    // Communicators that got no file slot (acquire gave none): their progress blocks are our own memory, which the
    // live digests carry (shim/live/self_reader.h). Added at init once the identity is in the block (the host's thread,
    // under mu_ as acquire); an entry whose communicator was destroyed or failed its init is reused. false: the list
    // is full of live ones.
    static constexpr uint32_t kMaxUnslotted = 4096;
    bool add_unslotted(CommRuntime* cr);
    // Lock-free, from any thread of ours (the digest client): every entry, live or not; f checks.
    template <typename F>
    void for_each_unslotted(F&& f) const {
        const uint32_t n = unslotted_n_.load(std::memory_order_acquire);
        for (uint32_t i = 0; i < n && i < kMaxUnslotted; ++i)
            if (CommRuntime* cr = unslotted_list_[i].load(std::memory_order_acquire)) f(*cr);
    }

private:
    struct Entry {
        CommRuntime* owner = nullptr;     // nullptr: never used or released
        CommRuntime* released = nullptr;  // released, still writing into the slot (not detached yet)
        uint64_t released_order = 0;      // 0: never used
        uint64_t marks[kPassCounters] = {};
    };
    void detach(Entry& e, uint32_t index);
    // The index of the entry released longest ago among those `pick` accepts; capacity_ when none.
    template <typename Pick>
    uint32_t least_recently_released(Pick&& pick) const {
        uint32_t best = capacity_;
        for (uint32_t i = 0; i < capacity_; ++i)
            if (pick(entries_[i]) && (best == capacity_ || entries_[i].released_order < entries_[best].released_order))
                best = i;
        return best;
    }
    bool quiet_since(const Entry& e) const;

    std::mutex mu_;  // init and destroy only, never per op
    disk::CommSlot* table_ = nullptr;
    uint32_t capacity_ = 0;
    std::atomic<uint32_t>* num_comms_ = nullptr;
    std::atomic<uint64_t>* unslotted_ = nullptr;
    uint32_t used_ = 0;  // slots handed out at least once
    uint64_t order_ = 0;
    Entry entries_[disk::kMaxComms];
    const PassCounter* passes_[kPassCounters] = {};
    std::atomic<uint32_t> overflowed_{0};
    std::atomic<CommRuntime*> unslotted_list_[kMaxUnslotted] = {};
    std::atomic<uint32_t> unslotted_n_{0};
};

}  // namespace ncw

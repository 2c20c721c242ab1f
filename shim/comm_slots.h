// Which slot of the rank file's comm table each communicator holds. The table has a fixed size (readers map it at a
// fixed place), so slots of destroyed communicators are reused; a communicator that finds none free is watched in a
// slot of our own in memory ("overflow": the watchdog sees it, readers of the file see its ring records only).
//
// Reuse, in order: destroy (the state written, the last followers settled) → the slot keeps receiving that
// communicator's late writes (the completion poller finishing its last events) while it stays in the file → a later
// init needs it (never-used slots go first, then the least recently destroyed: a destroyed communicator's final state
// stays on disk as long as possible) → detach: the old CommRuntime gets a private copy to write into from then on →
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

class SlotTable {
public:
    static constexpr int kPassCounters = 2;  // the completion poller's and the watchdog's

    // table: the file's comm table of `capacity` slots; num_comms: the header's high-water mark.
    void bind(disk::CommSlot* table, uint32_t capacity, std::atomic<uint32_t>* num_comms);
    void watch_passes(int i, const PassCounter* c) { passes_[i] = c; }

    // At init (the host's thread, once per communicator): a slot rewritten empty under its seqlock and left odd
    // (publish() ends the rewrite), with its index; nullptr when none can be had (index 0xffff).
    disk::CommSlot* acquire(CommRuntime* owner, uint16_t& index);
    // Ends the rewrite that acquire began: the identity written, readers may copy the slot.
    static void publish(disk::CommSlot& s);
    // At destroy or abort, after the state is written and the settle: the file's slot keeps the final state (and
    // takes cr's late writes) until a later communicator needs it.
    void release(CommRuntime& cr);

    uint32_t overflowed() const { return overflowed_.load(std::memory_order_relaxed); }

private:
    struct Entry {
        CommRuntime* owner = nullptr;     // nullptr: never used or released
        CommRuntime* released = nullptr;  // released, still writing into the slot (not detached yet)
        uint64_t released_order = 0;      // 0: never used
        uint64_t marks[kPassCounters] = {};
    };
    void detach(Entry& e, uint32_t index);
    bool quiet_since(const Entry& e) const;

    std::mutex mu_;  // init and destroy only, never per op
    disk::CommSlot* table_ = nullptr;
    uint32_t capacity_ = 0;
    std::atomic<uint32_t>* num_comms_ = nullptr;
    uint32_t used_ = 0;  // slots handed out at least once
    uint64_t order_ = 0;
    Entry entries_[disk::kMaxComms];
    const PassCounter* passes_[kPassCounters] = {};
    std::atomic<uint32_t> overflowed_{0};
};

}  // namespace ncw

#include "shim/record/comm_registry.h"

#include <new>

namespace ncw {

bool StreamClaim::mark_due_slow(uint64_t count) {
    const uint64_t f = followers.load(std::memory_order_relaxed);
    const uint32_t in_flight = marks.load(std::memory_order_relaxed) - marks_resolved.load(std::memory_order_relaxed);
    const uint64_t spacing = kMarkEveryOps << (in_flight / kMarksPerDoubling);
    const uint64_t at = mark_followers.load(std::memory_order_relaxed) + spacing;
    if (in_flight >= kMaxMarks || (f < at && count < kMarkEveryElems)) {
        mark_due_at.store(in_flight >= kMaxMarks ? f + kMarkEveryOps : at, std::memory_order_relaxed);
        return false;
    }
    restart_marks(f);
    marks.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void CommRuntime::renew() {
    const uint64_t next = life.load() + 1;
    disk::CommSlot* own = own_slot;
    std::atomic<uint64_t>* send = send_seq;
    std::atomic<uint64_t>* recv = recv_seq;
    const uint32_t capacity = peer_capacity;
    // The whole object, not a list of members: a member added later starts each life as it starts the first.
    this->~CommRuntime();
    new (this) CommRuntime;
    life.store(next);
    own_slot = own;
    send_seq = send;
    recv_seq = recv;
    peer_capacity = capacity;
}

bool CommRegistry::insert(ncclComm_t comm, CommRuntime* cr) {
    uintptr_t key = reinterpret_cast<uintptr_t>(comm);
    if (!key) return false;
    size_t i = hash(key);
    for (size_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
        uintptr_t k = keys_[i].load(std::memory_order_acquire);
        if (k == 0) {
            if (keys_[i].compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
                values_[i].store(cr, std::memory_order_release);
                return true;
            }
        }
        if (k == key) {  // the pointer of a destroyed communicator, reused by NCCL
            values_[i].store(cr, std::memory_order_release);
            return true;
        }
    }
    // Every key is taken: reuse a tombstone (a destroyed communicator's key). A lookup of that old pointer could
    // only come from a use after destroy, which NCCL itself does not allow.
    for (size_t n = 0; n < kCapacity; ++n) {
        uintptr_t k = keys_[n].load(std::memory_order_acquire);
        if (k && !values_[n].load(std::memory_order_acquire) &&
            keys_[n].compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
            values_[n].store(cr, std::memory_order_release);
            return true;
        }
    }
    return false;
}

void CommRegistry::remove(ncclComm_t comm) {
    uintptr_t key = reinterpret_cast<uintptr_t>(comm);
    size_t i = hash(key);
    for (size_t n = 0; n < kCapacity && key; ++n, i = (i + 1) & (kCapacity - 1)) {
        uintptr_t k = keys_[i].load(std::memory_order_acquire);
        if (k == key) {
            values_[i].store(nullptr, std::memory_order_release);
            return;
        }
        if (k == 0) return;
    }
}

}  // namespace ncw

// A bounded multi-producer multi-consumer queue (Dmitry Vyukov's design): lock-free, and it never allocates after
// construction, which is what the hot path needs. A full queue makes try_push fail; the caller degrades instead of
// waiting. FIFO over all producers, for any number of threads. Why not moodycamel's ConcurrentQueue (measured, issue
// 16): docs/PERFORMANCE.md, "The queues".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ncw {

template <typename T>
class MpmcQueue {
public:
    explicit MpmcQueue(size_t capacity_pow2) : mask_(capacity_pow2 - 1), cells_(new Cell[capacity_pow2]) {
        for (size_t i = 0; i < capacity_pow2; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
    }

    bool try_push(const T& v) {
        size_t pos = head_.load(std::memory_order_relaxed);
        for (;;) {
            Cell& c = cells_[pos & mask_];
            size_t seq = c.seq.load(std::memory_order_acquire);
            intptr_t diff = intptr_t(seq) - intptr_t(pos);
            if (diff == 0) {
                if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    c.value = v;
                    c.seq.store(pos + 1, std::memory_order_release);
                    return true;
                }
            } else if (diff < 0) {
                return false;
            } else {
                pos = head_.load(std::memory_order_relaxed);
            }
        }
    }

    bool try_pop(T& out) {
        size_t pos = tail_.load(std::memory_order_relaxed);
        for (;;) {
            Cell& c = cells_[pos & mask_];
            size_t seq = c.seq.load(std::memory_order_acquire);
            intptr_t diff = intptr_t(seq) - intptr_t(pos + 1);
            if (diff == 0) {
                if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    out = c.value;
                    c.seq.store(pos + mask_ + 1, std::memory_order_release);
                    return true;
                }
            } else if (diff < 0) {
                return false;
            } else {
                pos = tail_.load(std::memory_order_relaxed);
            }
        }
    }

private:
    struct Cell {
        std::atomic<size_t> seq;
        T value;
    };
    const size_t mask_;
    std::unique_ptr<Cell[]> cells_;
    alignas(64) std::atomic<size_t> head_{0};
    alignas(64) std::atomic<size_t> tail_{0};
};

}  // namespace ncw

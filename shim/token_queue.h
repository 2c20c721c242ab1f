// moodycamel's ConcurrentQueue behind MpmcQueue's interface, for the queue-choice benchmark (issue 16, point 6):
// pre-sized for kSlots explicit producers, one ProducerToken per thread slot, try_enqueue only (never allocates once
// sized). A thread gets its slot on first use (one fetch_add, an initial-exec TLS word); past kSlots threads, pushes
// fail (the caller degrades).
#pragma once

#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace ncw {

extern thread_local uint32_t tl_queue_slot __attribute__((tls_model("initial-exec")));  // 0: none yet; else slot+1
uint32_t claim_queue_slot();

template <typename T>
class TokenQueue {
public:
    static constexpr size_t kSlots = 16;
    struct Traits : moodycamel::ConcurrentQueueDefaultTraits {
        static const size_t BLOCK_SIZE = 32;
        static const size_t EXPLICIT_INITIAL_INDEX_SIZE = 512;
    };
    // Each of kSlots producers can hold `per_producer` items (the constructor's pre-sizing).
    explicit TokenQueue(size_t per_producer) : q_(per_producer, kSlots + 1, 0) {
        tokens_ = static_cast<moodycamel::ProducerToken*>(::operator new(sizeof(moodycamel::ProducerToken) * kSlots));
        for (size_t i = 0; i < kSlots; ++i) new (&tokens_[i]) moodycamel::ProducerToken(q_);
        consumers_ =
            static_cast<moodycamel::ConsumerToken*>(::operator new(sizeof(moodycamel::ConsumerToken) * kSlots));
        for (size_t i = 0; i < kSlots; ++i) new (&consumers_[i]) moodycamel::ConsumerToken(q_);
    }
    TokenQueue(const TokenQueue&) = delete;
    TokenQueue& operator=(const TokenQueue&) = delete;

    bool try_push(const T& v) {
        uint32_t s = tl_queue_slot;
        if (__builtin_expect(s == 0, 0)) s = claim_queue_slot();
        if (s > kSlots) return false;
        return q_.try_enqueue(tokens_[s - 1], v);
    }
    bool try_pop(T& out) {
        uint32_t s = tl_queue_slot;
        if (__builtin_expect(s == 0, 0)) s = claim_queue_slot();
        if (s > kSlots) return q_.try_dequeue(out);
        return q_.try_dequeue(consumers_[s - 1], out);
    }

private:
    moodycamel::ConcurrentQueue<T, Traits> q_;
    moodycamel::ProducerToken* tokens_;
    moodycamel::ConsumerToken* consumers_;  // never destroyed: the shim's objects outlive static destruction
};

}  // namespace ncw

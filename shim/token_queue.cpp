#include "token_queue.h"

namespace ncw {

thread_local uint32_t tl_queue_slot __attribute__((tls_model("initial-exec"))) = 0;

uint32_t claim_queue_slot() {
    static std::atomic<uint32_t> next{0};
    const uint32_t n = next.fetch_add(1, std::memory_order_relaxed);
    tl_queue_slot = n < 0xfffffff0u ? n + 1 : 0xfffffff0u;
    return tl_queue_slot;
}

}  // namespace ncw

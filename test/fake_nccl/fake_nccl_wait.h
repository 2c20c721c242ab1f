// The test NCCL's waiting and exchange helpers, shared by its communicator code (fake_nccl_comm.cpp) and its
// split and shrink (fake_nccl_split.cpp).
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "fake_nccl_comm.h"

namespace ncw::fake::detail {

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_from_now() {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings().timeout_sec));
}

inline std::string comm_label(const Comm* c) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "comm %p rank %d/%d", static_cast<const void*>(c), c->rank, c->nranks);
    return buf;
}

// Puts the communicator into the error state that ncclCommGetAsyncError reports.
inline ncclResult_t fail(Comm* c, const std::string& message) {
    c->async_error.store(ncclSystemError);
    return report(ncclSystemError, comm_label(c) + ": " + message);
}

// Polls `done` with sleeps that back off from 1 us to 1 ms. Fails promptly when the communicator is aborted locally,
// and after the safety timeout; unless `recovery` (ncclCommShrink, which NCCL uses to recover from a failed rank),
// also when it is revoked locally or a peer aborted it. `missing` describes, for the timeout message, what the wait
// still lacks.
template <typename Done, typename Missing>
ncclResult_t wait_until(Comm* c, const char* what, Clock::time_point deadline, Done done, Missing missing,
                        bool recovery = false) {
    long sleep_ns = 1000;
    for (;;) {
        if (c->aborted.load(std::memory_order_acquire)) return fail(c, std::string(what) + ": communicator aborted");
        if (!recovery && c->revoked.load(std::memory_order_acquire)) {
            return report(ncclSystemError, comm_label(c) + ": " + what + ": communicator revoked");
        }
        // Completion wins over a peer's abort: a peer that finished this op and then aborted did not break it.
        if (done()) return ncclSuccess;
        if (!recovery && c->seg->aborted.load(std::memory_order_acquire) != 0) {
            return fail(c, std::string(what) + ": a peer aborted the communicator");
        }
        if (Clock::now() > deadline) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%g", settings().timeout_sec);
            return fail(c, std::string(what) + ": timed out after " + secs + " s (FAKE_NCCL_TIMEOUT_SEC) waiting for " +
                               missing());
        }
        timespec ts{0, sleep_ns};
        nanosleep(&ts, nullptr);
        sleep_ns = std::min(sleep_ns * 2, 1000000L);
    }
}

// Lists the ranks among `ranks` for which `counter(i) < target`.
template <typename Counter>
std::string lagging_ranks(const std::vector<int>& ranks, uint64_t target, Counter counter) {
    std::string out;
    int shown = 0;
    for (int i : ranks) {
        uint64_t v = counter(i);
        if (v >= target) continue;
        if (shown++ == 16) {
            out += " ...";
            break;
        }
        out += (out.empty() ? "rank " : ", rank ") + std::to_string(i) + " (at " + std::to_string(v) + ")";
    }
    return out.empty() ? std::string("nothing (raced)") : out;
}

inline std::vector<int> all_ranks(const Comm* c) {
    std::vector<int> r(c->nranks);
    for (int i = 0; i < c->nranks; ++i) r[i] = i;
    return r;
}

// Posts `op` into the communicator's segment, and waits for every member's matching post (fake_nccl_comm.cpp).
void post(Op& op);
ncclResult_t wait_op(const Op& op, Clock::time_point deadline);

}  // namespace ncw::fake::detail

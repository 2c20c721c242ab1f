// The shim's process-wide state, a plain struct that every room reads. It comes into being at the first communicator
// init (shim/start/startup.cpp; a process that never uses NCCL gets no thread and no file) and is never destroyed:
// wrappers and our threads may run during exit.
#pragma once

#include <nccl.h>

#include <atomic>
#include <string>
#include <vector>

#include "shim/base/config.h"
#include "shim/record/comm_pool.h"
#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "shim/record/process_identity.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/recorder.h"

namespace ncw {

class CompletionTracker;  // shim/complete/completion_tracker.h

// The live collector's newest verdict line for this job (the reason of its DumpRequest), for the watchdog to lead
// its stall report with when its own view (this node's rank files) cannot name the culprit. Written by the digest
// client's thread, read by the watchdog's: a seqlock (odd while written).
struct CollectorVerdict {
    static constexpr size_t kMax = 1024;
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> at_ns{0};  // when it arrived (CLOCK_MONOTONIC); 0: none yet
    char line[kMax] = {};
    void put(const char* text, size_t n, uint64_t now) {
        n = n < kMax - 1 ? n : kMax - 1;
        seq.fetch_add(1, std::memory_order_acq_rel);
        for (size_t i = 0; i < n; ++i) __atomic_store_n(&line[i], text[i], __ATOMIC_RELAXED);
        __atomic_store_n(&line[n], '\0', __ATOMIC_RELAXED);
        at_ns.store(now, std::memory_order_relaxed);
        seq.fetch_add(1, std::memory_order_release);
    }
    // false: none yet, or being written (ask again).
    bool get(std::string& out, uint64_t& at) const {
        const uint64_t before = seq.load(std::memory_order_acquire);
        if (before == 0 || (before & 1)) return false;
        char copy[kMax];
        for (size_t i = 0; i < kMax; ++i) copy[i] = __atomic_load_n(&line[i], __ATOMIC_RELAXED);
        at = at_ns.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq.load(std::memory_order_relaxed) != before) return false;
        copy[kMax - 1] = '\0';
        out = copy;
        return true;
    }
};

// The process's end, told to the live digest client so that the collector hears how it ended before it is gone
// (shim/watch/process_end.cpp asks, async-signal-safely: a write to the client's eventfd; the client's thread sends
// and answers by raising `sent`).
struct LiveEnd {
    std::atomic<int> wake_fd{-1};  // the client's eventfd; -1: no client
    std::atomic<uint32_t> asked{0};
    std::atomic<uint32_t> sent{0};
};

struct Runtime {
    Config cfg;
    ProcessIdentity id;
    RankFileWriter file;
    EnvList env;
    CommRegistry comms;
    SlotTable slots;
    CommPool comm_pool;                    // destroyed communicators' runtimes, reused (comm_pool.h)
    PassCounter watchdog_pass;             // the watchdog's polls (comm_slots.h)
    PassCounter watchdog_reads;            // its walks of the registry, inside a poll (comm_pool.h)
    PassCounter digest_pass;               // the digest client's reads of the communicators (comm_pool.h)
    CompletionTracker* tracker = nullptr;  // nullptr: CPU semantics (complete on return)
    // No GPU tracking at all (no tracker, and NCCL's profiler events not ours): every op completes on its return, on
    // the thread that issued it, which is then its communicator's only completer (record_done_on_return).
    bool completes_on_return = false;
    BacktraceFn backtrace = nullptr;
    std::atomic<uint32_t> group_counter{0};
    std::atomic<uint64_t> initall_counter{0};
    std::atomic<int> pending_identities{0};  // communicators whose rank/size/device NCCL could not tell yet
    int nccl_version = 0;
    CollectorVerdict collector_verdict;
    LiveEnd live_end;
};

extern std::atomic<Runtime*> g_runtime;

// The hot path's check: nullptr means pass-through (not started, disabled, or a forked child).
inline Runtime* runtime() { return g_runtime.load(std::memory_order_acquire); }

}  // namespace ncw

// The CUDA graphs that hold captured NCCL ops, and their instantiations: what one launch of an executable graph runs.
// A captured op runs nothing at its call; it runs at every launch of its graph, and NCCL pairs each run with the
// peers' ops as one more op of its communicator. So a launch is recorded as its captured ops (graph_hooks.cpp), each
// with a sequence number of its own, and a rank that skipped or added a replay drifts like one that skipped or added
// a call.
//
// Captures, instantiations and destructions are rare and take a spinlock among themselves; a launch only reads
// (atomics, no lock, no allocation). Fixed tables: past them a graph's replays are not recorded, and that is said
// once.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>

#include "shim/record/recorder.h"

namespace ncw {

struct CommRuntime;

struct CapturedOp {
    CommRuntime* cr = nullptr;
    uint64_t life = 0;  // cr's life at the capture: a later communicator's reuse of it runs nothing of this graph
    OpDesc desc{};      // as captured; a replay's stream is its launch's
};

class GraphRegistry {
public:
    static constexpr uint32_t kGraphs = 32;
    static constexpr uint32_t kOpsPerGraph = 256;  // ThreadState::kMaxGroupOps: one launch is recorded as one group
    static constexpr uint32_t kExecs = 64;

    struct Graph {
        std::atomic<uintptr_t> handle{0};  // the CUgraph; 0 once destroyed (or free)
        std::atomic<uint32_t> execs{0};    // live instantiations that run these ops
        bool in_use = false;               // under the lock
        bool overflow = false;             // more ops than kOpsPerGraph were captured: its launches are not recorded
        std::atomic<uint32_t> n{0};
        CapturedOp ops[kOpsPerGraph];
    };

    // An NCCL op issued into the capture on `stream`: appended to the graph that capture builds (the driver names
    // it). Called at the op's call, on the capturing thread.
    void captured(CommRuntime& cr, const OpDesc& d, cudaStream_t stream);
    // The same for an op of a group, found by its record (a group's ops are looked at per stream at its end).
    void captured(const RankFileWriter& f, const OpRef& ref, cudaStream_t stream);
    // A graph was instantiated (cudaGraphInstantiate*): its launches run its captured ops.
    void instantiated(void* graph, void* exec);
    void exec_destroyed(void* exec);
    void graph_destroyed(void* graph);
    // The captured ops one launch of `exec` runs (nullptr: none); valid until `exec` is destroyed.
    const Graph* ops_of(void* exec) const;

private:
    struct Exec {
        std::atomic<uintptr_t> handle{0};  // the CUgraphExec; 0 = free
        std::atomic<int32_t> graph{-1};
    };
    void lock();
    void unlock() { lock_.store(false, std::memory_order_release); }
    int find_graph_locked(uintptr_t graph) const;
    void release_graph_locked(int g);

    std::atomic<bool> lock_{false};
    std::atomic<uint32_t> live_execs_{0};  // 0: a launch looks no further (every process that never captures NCCL)
    std::atomic<bool> full_logged_{false};
    Graph graphs_[kGraphs];
    Exec execs_[kExecs];
};

// The process's registry (zero-initialised, constant: no constructor runs).
GraphRegistry& graph_registry();

}  // namespace ncw

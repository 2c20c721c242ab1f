#include "shim/record/graph_registry.h"

#include <sched.h>

#include "shim/base/cuda_driver.h"
#include "shim/base/log.h"
#include "shim/record/comm_registry.h"

namespace ncw {

namespace {
constinit GraphRegistry g_registry;
}  // namespace

GraphRegistry& graph_registry() { return g_registry; }

void GraphRegistry::lock() {
    while (lock_.exchange(true, std::memory_order_acquire)) sched_yield();
}

int GraphRegistry::find_graph_locked(uintptr_t graph) const {
    for (uint32_t i = 0; i < kGraphs; ++i)
        if (graphs_[i].in_use && graphs_[i].handle.load(std::memory_order_relaxed) == graph) return int(i);
    return -1;
}

// A graph's entry is free once the graph is destroyed and no instantiation of it lives.
void GraphRegistry::release_graph_locked(int g) {
    Graph& e = graphs_[g];
    if (e.handle.load(std::memory_order_relaxed) || e.execs.load(std::memory_order_relaxed)) return;
    e.in_use = false;
    e.overflow = false;
    e.n.store(0, std::memory_order_relaxed);
}

void GraphRegistry::captured(CommRuntime& cr, const OpDesc& d, cudaStream_t stream) {
    const CudaDriver& cu = cuda_driver();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph graph = nullptr;
    if (!cu.cuStreamGetCaptureInfo ||
        cu.cuStreamGetCaptureInfo(reinterpret_cast<CUstream>(stream), &status, &id, &graph, nullptr, nullptr) !=
            CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph) {
        NCW_LOG_ONCE(warn,
                     "an NCCL op was captured into a CUDA graph, and the driver does not say which graph: its "
                     "replays are not recorded, and this communicator's sequence numbers leave them out");
        return;
    }
    const auto key = reinterpret_cast<uintptr_t>(graph);
    lock();
    int g = find_graph_locked(key);
    for (uint32_t i = 0; g < 0 && i < kGraphs; ++i) {
        if (graphs_[i].in_use) continue;
        g = int(i);
        graphs_[i].in_use = true;
        graphs_[i].overflow = false;
        graphs_[i].n.store(0, std::memory_order_relaxed);
        graphs_[i].execs.store(0, std::memory_order_relaxed);
        graphs_[i].handle.store(key, std::memory_order_relaxed);
    }
    bool full = g < 0;
    if (g >= 0) {
        Graph& e = graphs_[g];
        const uint32_t n = e.n.load(std::memory_order_relaxed);
        if (n < kOpsPerGraph) {
            e.ops[n].cr = &cr;
            e.ops[n].life = cr.life.load(std::memory_order_relaxed);
            e.ops[n].desc = d;
            e.n.store(n + 1, std::memory_order_release);
        } else {
            e.overflow = true;
            full = true;
        }
    }
    unlock();
    if (full && !full_logged_.exchange(true, std::memory_order_relaxed))
        log().warn(
            "more CUDA graphs holding NCCL ops than ncclwatch follows ({} graphs of up to {} ops): the replays of "
            "the ones beyond are not recorded, and the sequence numbers of their communicators leave them out",
            kGraphs, kOpsPerGraph);
}

void GraphRegistry::captured(const RankFileWriter& f, const OpRef& ref, cudaStream_t stream) {
    const disk::OpRecord* rec_p = ref.cr ? live_record(f, ref) : nullptr;
    if (!rec_p) return;
    const disk::OpRecord& rec = *rec_p;
    OpDesc d{};
    d.op = disk::OpType(rec.op);
    d.sendbuf = reinterpret_cast<const void*>(rec.sendbuf);
    d.recvbuf = reinterpret_cast<void*>(rec.recvbuf);
    d.count = rec.count;
    d.dtype = rec.dtype;
    d.redop = rec.redop;
    d.root_or_peer = rec.peer_or_root;
    d.comm = ref.cr->comm;
    d.stream = stream;
    captured(*ref.cr, d, stream);
}

void GraphRegistry::instantiated(void* graph, void* exec) {
    if (!graph || !exec) return;
    lock();
    const int g = find_graph_locked(reinterpret_cast<uintptr_t>(graph));
    bool full = false;
    if (g >= 0 && !graphs_[g].overflow) {
        full = true;
        for (uint32_t i = 0; i < kExecs; ++i) {
            if (execs_[i].handle.load(std::memory_order_relaxed)) continue;
            graphs_[g].execs.fetch_add(1, std::memory_order_relaxed);
            execs_[i].graph.store(g, std::memory_order_relaxed);
            execs_[i].handle.store(reinterpret_cast<uintptr_t>(exec), std::memory_order_release);
            live_execs_.fetch_add(1, std::memory_order_release);
            full = false;
            break;
        }
    }
    unlock();
    if (full && !full_logged_.exchange(true, std::memory_order_relaxed))
        log().warn(
            "more instantiated CUDA graphs holding NCCL ops than ncclwatch follows ({}): the replays of the ones "
            "beyond are not recorded, and the sequence numbers of their communicators leave them out",
            kExecs);
}

void GraphRegistry::exec_destroyed(void* exec) {
    if (!exec || !live_execs_.load(std::memory_order_acquire)) return;
    lock();
    for (uint32_t i = 0; i < kExecs; ++i) {
        if (execs_[i].handle.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(exec)) continue;
        const int g = execs_[i].graph.load(std::memory_order_relaxed);
        execs_[i].handle.store(0, std::memory_order_release);
        live_execs_.fetch_sub(1, std::memory_order_relaxed);
        if (g >= 0) {
            graphs_[g].execs.fetch_sub(1, std::memory_order_relaxed);
            release_graph_locked(g);
        }
        break;
    }
    unlock();
}

void GraphRegistry::graph_destroyed(void* graph) {
    if (!graph) return;
    lock();
    // torch destroys its graph right after instantiating it: the ops stay with the instantiations.
    const int g = find_graph_locked(reinterpret_cast<uintptr_t>(graph));
    if (g >= 0) {
        graphs_[g].handle.store(0, std::memory_order_relaxed);
        release_graph_locked(g);
    }
    unlock();
}

const GraphRegistry::Graph* GraphRegistry::ops_of(void* exec) const {
    if (!exec || !live_execs_.load(std::memory_order_acquire)) return nullptr;
    const auto key = reinterpret_cast<uintptr_t>(exec);
    for (uint32_t i = 0; i < kExecs; ++i) {
        if (execs_[i].handle.load(std::memory_order_acquire) != key) continue;
        const int g = execs_[i].graph.load(std::memory_order_relaxed);
        return g >= 0 ? &graphs_[g] : nullptr;
    }
    return nullptr;
}

}  // namespace ncw

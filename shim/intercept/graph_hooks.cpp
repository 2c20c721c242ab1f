// The CUDA runtime's graph calls (api_table.h: NCW_CUDART_HOOKED). An instantiation of a graph that holds captured
// NCCL ops is remembered (graph_registry.h), and each launch of it is recorded as those ops, launched together on the
// launch's stream: NCCL runs them again at every launch, and the peers pair each run with an op of their own. Each
// hook calls the real function exactly once and returns its result.
#include <dlfcn.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/intercept/cudart_real.h"
#include "shim/intercept/hooks.h"
#include "shim/intercept/op_hook.h"
#include "shim/record/graph_registry.h"
#include "shim/record/profiler_link.h"
#include "shim/record/runtime.h"

namespace ncw {

namespace {

// One launch of a graph with captured ops: the real launch, as launch_gathered's `launch`.
struct Launch {
    int (*real)(void*, cudaStream_t) = nullptr;
    void* exec = nullptr;
    cudaStream_t stream = nullptr;
    int result = kCudaErrorUnknown;
};

ncclResult_t launch_now(void* arg) {
    auto* l = static_cast<Launch*>(arg);
    l->result = l->real ? l->real(l->exec, l->stream) : kCudaErrorUnknown;
    return l->result == 0 ? ncclSuccess : ncclUnhandledCudaError;
}

// NCCL's kernel events of a communicator whose graphs are replayed prove nothing from the first replay on: NCCL's
// proxy pairs its per-channel work counters with its ops in launch order, and a replay's work is launched by the GPU
// behind eager ops the CPU issued later (measured: the eager op after a skipped replay read as complete while it
// hung). Its ops take CUDA events from then on (profiler_plugin.cpp: `desynced`).
void replays_desync(CommRuntime& cr) {
    ProfilerLink* pl = cr.prof.load(std::memory_order_acquire);
    if (pl && !pl->desynced.load(std::memory_order_relaxed)) {
        pl->replayed.store(true, std::memory_order_relaxed);
        pl->desynced.store(true, std::memory_order_relaxed);
    }
}

int launch_graph(CudartFn& fn, void* exec, cudaStream_t stream) {
    CallScope scope;
    Launch l;
    l.real = real_of<int (*)(void*, cudaStream_t)>(fn);
    l.exec = exec;
    l.stream = stream;
    Runtime* rt = runtime();
    const GraphRegistry::Graph* g = rt && !scope.nested() ? graph_registry().ops_of(exec) : nullptr;
    ThreadState& ts = scope.ts();
    // Inside an open NCCL group the thread's gathered ops are the group's: the replay is not recorded (a graph
    // launched between ncclGroupStart and ncclGroupEnd is nothing a framework does).
    if (!g || !l.real || ts.group_depth > 0) {
        errno = scope.saved_errno();
        launch_now(&l);
        return l.result;
    }
    const uint32_t n = g->n.load(std::memory_order_acquire);
    const uint64_t t_issue = now_mono_ns();
    IssueOptions opt;
    opt.tid = scope.tid();
    opt.backtrace = rt->backtrace;
    opt.origin = uint8_t(disk::RecordOrigin::Replay);
    if (n > 1) {
        opt.group_id = rt->group_counter.fetch_add(1, std::memory_order_relaxed) + 1;
        opt.flags |= disk::kFlagInGroup;
    }
    ts.group_n = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const CapturedOp& op = g->ops[i];
        // A communicator destroyed since the capture runs nothing of ours (NCCL would fail the launch), nor does a
        // later one that NCCL gave the same pointer and whose runtime is the destroyed one's, made new (its life).
        if (!op.cr || op.cr->destroyed.load(std::memory_order_relaxed) || rt->comms.find(op.desc.comm) != op.cr ||
            op.cr->life.load(std::memory_order_acquire) != op.life)
            continue;
        replays_desync(*op.cr);
        OpDesc d = op.desc;
        d.stream = stream;
        DevicePool* pool = rt->tracker ? op.cr->pool.load(std::memory_order_relaxed) : nullptr;
        group_add(*rt, ts, record_issue(rt->file, *op.cr, d, opt, t_issue), stream, pool, nullptr);
    }
    launch_gathered(scope, *rt, ts, launch_now, &l);
    return l.result;
}

}  // namespace

namespace cudart_hook {

// After a successful instantiation (the program's errno as the real call left it).
#define NCW_INSTANTIATE(name, params, call_args)     \
    using Fn = int(*) params;                        \
    Fn real = real_of<Fn>(real_cudart::name);        \
    if (!real) return kCudaErrorUnknown;             \
    const int r = real call_args;                    \
    if (r == 0 && exec) {                            \
        ErrnoKeeper keep;                            \
        graph_registry().instantiated(graph, *exec); \
    }                                                \
    return r;

int cudaGraphInstantiate(void** exec, void* graph, uintptr_t a2, uintptr_t a3, uintptr_t a4) {
    NCW_INSTANTIATE(cudaGraphInstantiate, (void**, void*, uintptr_t, uintptr_t, uintptr_t), (exec, graph, a2, a3, a4))
}

int cudaGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) {
    NCW_INSTANTIATE(cudaGraphInstantiateWithFlags, (void**, void*, unsigned long long), (exec, graph, flags))
}

int cudaGraphInstantiateWithParams(void** exec, void* graph, void* params) {
    NCW_INSTANTIATE(cudaGraphInstantiateWithParams, (void**, void*, void*), (exec, graph, params))
}
#undef NCW_INSTANTIATE

int cudaGraphLaunch(void* exec, cudaStream_t stream) {
    return launch_graph(real_cudart::cudaGraphLaunch, exec, stream);
}

int cudaGraphLaunch_ptsz(void* exec, cudaStream_t stream) {
    return launch_graph(real_cudart::cudaGraphLaunch_ptsz, exec, stream);
}

// Forgotten before the real call: the handle may be another's once it returns.
int cudaGraphExecDestroy(void* exec) {
    {
        ErrnoKeeper keep;
        graph_registry().exec_destroyed(exec);
    }
    auto real = real_of<int (*)(void*)>(real_cudart::cudaGraphExecDestroy);
    return real ? real(exec) : kCudaErrorUnknown;
}

int cudaGraphDestroy(void* graph) {
    {
        ErrnoKeeper keep;
        graph_registry().graph_destroyed(graph);
    }
    auto real = real_of<int (*)(void*)>(real_cudart::cudaGraphDestroy);
    return real ? real(graph) : kCudaErrorUnknown;
}

}  // namespace cudart_hook
}  // namespace ncw

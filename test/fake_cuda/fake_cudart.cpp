// The fake libcudart.so.13: the CUDA runtime's graph calls the shim intercepts (api_table.h: NCW_CUDART_HOOKED), over
// the fake libcuda's graphs (fake_cuda.h). An executable graph is its graph's handle + 1; a launch runs the graph's
// nodes on the calling thread and answers 0, or cudaErrorUnknown (999) when a node failed.
#include <cstdint>

#include "fake_cuda.h"

extern "C" {

static int instantiate(void** exec, void* graph) {
    if (exec == nullptr || graph == nullptr) return 1;  // cudaErrorInvalidValue
    *exec = static_cast<char*>(graph) + 1;
    return 0;
}

int cudaGraphInstantiate(void** exec, void* graph, unsigned long long) { return instantiate(exec, graph); }
int cudaGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) { return instantiate(exec, graph); }
int cudaGraphInstantiateWithParams(void** exec, void* graph, void*) { return instantiate(exec, graph); }

int cudaGraphLaunch(void* exec, void*) {
    if (exec == nullptr) return 1;
    return fakecuda_graph_run(static_cast<char*>(exec) - 1) == 0 ? 0 : 999;
}
int cudaGraphLaunch_ptsz(void* exec, void* stream) { return cudaGraphLaunch(exec, stream); }
int cudaGraphExecDestroy(void*) { return 0; }
int cudaGraphDestroy(void*) { return 0; }

}  // extern "C"

// The CUDA driver API, opened at run time: the shim has no DT_NEEDED on libcuda. It is used only when the host
// program already loaded libcuda.so.1 (RTLD_NOLOAD): a process that does not use CUDA (the CPU tests, a fake NCCL)
// gets CPU semantics, an operation completes when its call returns.
#pragma once

#include <cuda.h>

namespace ncw {

struct CudaDriver {
    bool ok = false;
    int driver_version = 0;
    CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
    CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
    CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
    CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
    CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
    CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
    CUresult (*cuEventQuery)(CUevent) = nullptr;
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*) = nullptr;
    CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
    // Optional (nullptr when the driver lacks it; nothing else depends on it): the GPU's UUID for the rank file.
    CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;
    // Optional: which graph a stream's capture builds (CUDA 12's ABI, cuStreamGetCaptureInfo_v2), so that a launch of
    // it can be recorded as the NCCL ops captured into it (shim/record/graph_registry.h).
    CUresult (*cuStreamGetCaptureInfo)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                                       size_t*) = nullptr;
};

// Loads once; `ok` is false when libcuda is not in the process or lacks a function we need.
const CudaDriver& cuda_driver();

}  // namespace ncw

#include "shim/base/cuda_driver.h"

#include <dlfcn.h>

#include "shim/base/log.h"

namespace ncw {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

template <typename Fn>
bool load(void* lib, GetProcAddress gpa, const char* name, const char* versioned, Fn& out) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    // 12000: the CUDA 12 ABI of each entry point, which CUDA 13 drivers still serve.
    if (gpa) gpa(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (!p) p = dlsym(lib, versioned);
    out = reinterpret_cast<Fn>(p);
    return p != nullptr;
}

CudaDriver load_driver() {
    CudaDriver d;
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (!lib) return d;
    auto cuInit = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto cuDriverGetVersion = reinterpret_cast<CUresult (*)(int*)>(dlsym(lib, "cuDriverGetVersion"));
    auto gpa = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
    if (!cuInit || !cuDriverGetVersion || cuInit(0) != CUDA_SUCCESS) {
        log().warn("libcuda.so.1 is loaded but cuInit failed: GPU completion is not tracked");
        return d;
    }
    cuDriverGetVersion(&d.driver_version);
    bool ok = load(lib, gpa, "cuDeviceGet", "cuDeviceGet", d.cuDeviceGet) &&
              load(lib, gpa, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain) &&
              load(lib, gpa, "cuCtxPushCurrent", "cuCtxPushCurrent_v2", d.cuCtxPushCurrent) &&
              load(lib, gpa, "cuCtxPopCurrent", "cuCtxPopCurrent_v2", d.cuCtxPopCurrent) &&
              load(lib, gpa, "cuCtxSetCurrent", "cuCtxSetCurrent", d.cuCtxSetCurrent) &&
              load(lib, gpa, "cuEventCreate", "cuEventCreate", d.cuEventCreate) &&
              load(lib, gpa, "cuEventRecord", "cuEventRecord", d.cuEventRecord) &&
              load(lib, gpa, "cuEventQuery", "cuEventQuery", d.cuEventQuery) &&
              load(lib, gpa, "cuStreamIsCapturing", "cuStreamIsCapturing", d.cuStreamIsCapturing) &&
              load(lib, gpa, "cuThreadExchangeStreamCaptureMode", "cuThreadExchangeStreamCaptureMode",
                   d.cuThreadExchangeStreamCaptureMode) &&
              load(lib, gpa, "cuDeviceGetPCIBusId", "cuDeviceGetPCIBusId", d.cuDeviceGetPCIBusId);
    if (!ok) {
        log().warn("libcuda.so.1 lacks a driver function the shim needs: GPU completion is not tracked");
        return d;
    }
    // The GPU's UUID: the first entry point first (dlsym by its own name; cuGetProcAddress would serve _v2), since
    // dcgm-exporter's UUID label names the whole GPU and CUDA documents _v2 (11.4 on) as giving a MIG instance's own
    // UUID in MIG mode; outside MIG the two agree. (Not checked on MIG hardware.)
    d.cuDeviceGetUuid = reinterpret_cast<decltype(d.cuDeviceGetUuid)>(dlsym(lib, "cuDeviceGetUuid"));
    if (!d.cuDeviceGetUuid) load(lib, gpa, "cuDeviceGetUuid", "cuDeviceGetUuid_v2", d.cuDeviceGetUuid);
    load(lib, gpa, "cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v2", d.cuStreamGetCaptureInfo);
    d.ok = true;
    return d;
}

}  // namespace

const CudaDriver& cuda_driver() {
    static const CudaDriver d = load_driver();
    return d;
}

}  // namespace ncw

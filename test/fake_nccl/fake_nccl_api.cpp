// The exported NCCL API of the fake libnccl.so.2. Like the real library, each function is defined as pnccl<Name> and
// nccl<Name> is a weak alias of it, so that a preloaded wrapper can interpose on nccl<Name> and still reach the
// implementation. Arguments are validated here; the behaviour lives in fake_nccl_comm.cpp. Every entry point of every
// version is defined here; a variant's version script exports those its NCCL version has (fake_nccl_mapgen.cpp).
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fake_nccl_comm.h"
#include "fake_nccl_profiler.h"
#include "fake_nccl_version.h"
#include "ncclwatch/nccl_newer_api.h"

#define NCW_EXPORT extern "C" __attribute__((visibility("default")))
#define NCW_ALIAS(name) NCW_EXPORT decltype(p##name) name __attribute__((weak, alias("p" #name)));

namespace ncw::fake {
namespace {

ncclResult_t invalid(const std::string& message) { return group_error(report(ncclInvalidArgument, message)); }

bool valid_size(int nranks) { return nranks >= 1 && nranks <= kMaxRanks; }

ncclResult_t collective(ncclComm_t comm, const char* name, size_t count, ncclDataType_t datatype, cudaStream_t stream,
                        int root = 0, uint64_t user_tag = 0) {
    Comm* c = from_handle(comm, name);
    if (c == nullptr) return group_error(ncclInvalidArgument);
    if (datatype < 0 || datatype >= ncclNumTypes) {
        return invalid(std::string(name) + ": invalid datatype " + std::to_string(datatype));
    }
    if (root < 0 || root >= c->nranks) {
        return invalid(std::string(name) + ": invalid root " + std::to_string(root) + " for " +
                       std::to_string(c->nranks) + " ranks");
    }
    Op op{OpKind::Collective, c, name, -1, 0, stream, count};
    op.user_tag = user_tag;
    op.coll_api = profiler_coll_api(c, name, count, stream, user_tag);  // inside the call, as NCCL's CollApi event
    return submit(op);
}

// A Config form's configuration (2.31), as NCCL checks it: NULL is the plain call; otherwise NCCL's magic and at least
// 2.31's members (its `size` is the caller's sizeof: 2.32's is longer, and what lies past 2.31's is not read).
// Sets `user_tag` to its userProfilerTag.
ncclResult_t read_config(const ncw_coll_config_t* config, const char* fn, uint64_t& user_tag) {
    user_tag = 0;
    if (config == nullptr) return ncclSuccess;
    const auto* c = reinterpret_cast<const nccl_abi::CollConfig*>(config);
    if (c->magic != nccl_abi::kApiMagic) {
        return invalid(std::string(fn) +
                       ": config->magic is not NCCL_API_MAGIC (not from NCCL_COLLCONFIG_INITIALIZER?)");
    }
    if (c->size < offsetof(nccl_abi::CollConfig, launch_completion_event)) {
        return invalid(std::string(fn) + ": config->size " + std::to_string(c->size) + " is smaller than 2.31's");
    }
    user_tag = c->user_profiler_tag;
    static std::atomic<bool> said{false};  // once a process: enough to tell the NCCL's own form was called
    if (!said.exchange(true))
        debug("%s: called with NCCL's configuration, userProfilerTag %llu", fn,
              static_cast<unsigned long long>(user_tag));
    return ncclSuccess;
}

// ncclDataType_t's sizes, in nccl.h's order (int8 .. float8e5m2).
size_t type_size(ncclDataType_t t) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return t >= 0 && size_t(t) < sizeof sizes / sizeof sizes[0] ? sizes[t] : 1;
}

ncclResult_t p2p(ncclComm_t comm, OpKind kind, size_t count, ncclDataType_t datatype, int peer, cudaStream_t stream) {
    const char* name = kind == OpKind::Send ? "Send" : "Recv";
    Comm* c = from_handle(comm, name);
    if (c == nullptr) return group_error(ncclInvalidArgument);
    if (datatype < 0 || datatype >= ncclNumTypes) {
        return invalid(std::string(name) + ": invalid datatype " + std::to_string(datatype));
    }
    if (peer < 0 || peer >= c->nranks) return invalid(std::string(name) + ": invalid peer " + std::to_string(peer));
    Op op{kind, c, name, peer, 0, stream, count};
    op.bytes = count * type_size(datatype);
    op.coll_api = profiler_p2p_api(c, name, count, stream);  // inside the call, as NCCL's P2pApi event
    return submit(op);
}

// The one-sided calls (2.29) check their communicator and peer, and succeed without moving or waiting for anything:
// the double has no windows nor signals (a put writes nothing, a wait returns at once), which is enough for a program
// and the shim to go through them. A test of one-sided semantics needs a model of them first.
ncclResult_t one_sided(ncclComm_t comm, int peer, const char* fn) {
    Comm* c = from_handle(comm, fn);
    if (c == nullptr) return group_error(ncclInvalidArgument);
    if (peer < 0 || peer >= c->nranks) return invalid(std::string(fn) + ": invalid peer " + std::to_string(peer));
    return ncclSuccess;
}

ncclResult_t init_checked(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                          const char* fn) {
    if (comm == nullptr) return invalid(std::string(fn) + ": comm is NULL");
    *comm = nullptr;
    if (!valid_size(nranks)) return invalid(std::string(fn) + ": nranks " + std::to_string(nranks) + " out of range");
    if (rank < 0 || rank >= nranks)
        return invalid(std::string(fn) + ": rank " + std::to_string(rank) + " out of range");
    // blocking = 0 is accepted, but initialisation still completes before the call returns.
    bool nonblocking = config != nullptr && config->blocking == 0;
    return init_rank(id, nranks, rank, nonblocking, comm);
}

}  // namespace
}  // namespace ncw::fake

using namespace ncw::fake;

NCW_EXPORT ncclResult_t pncclGetVersion(int* version) {
    if (version == nullptr) return invalid("GetVersion: version is NULL");
    *version = version_code();  // the variant's, not the nccl.h it was built with
    return ncclSuccess;
}
NCW_ALIAS(ncclGetVersion)

NCW_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (uniqueId == nullptr) return invalid("GetUniqueId: uniqueId is NULL");
    return new_unique_id(uniqueId);
}
NCW_ALIAS(ncclGetUniqueId)

NCW_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return init_checked(comm, nranks, commId, rank, nullptr, "CommInitRank");
}
NCW_ALIAS(ncclCommInitRank)

NCW_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                ncclConfig_t* config) {
    return init_checked(comm, nranks, commId, rank, config, "CommInitRankConfig");
}
NCW_ALIAS(ncclCommInitRankConfig)

NCW_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                  ncclUniqueId* commIds, ncclConfig_t* config) {
    if (nId < 1 || commIds == nullptr) return invalid("CommInitRankScalable: no unique id");
    return init_checked(newcomm, nranks, commIds[0], myrank, config, "CommInitRankScalable");
}
NCW_ALIAS(ncclCommInitRankScalable)

NCW_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
    if (comm == nullptr) return invalid("CommInitAll: comm is NULL");
    if (!valid_size(ndev)) return invalid("CommInitAll: ndev " + std::to_string(ndev) + " out of range");
    return init_all(comm, ndev, devlist);
}
NCW_ALIAS(ncclCommInitAll)

NCW_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    Comm* c = from_handle(comm, "CommSplit");
    if (c == nullptr) return ncclInvalidArgument;
    if (newcomm == nullptr) return invalid("CommSplit: newcomm is NULL");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return invalid("CommSplit: negative color");
    return split(c, color, key, config, newcomm);
}
NCW_ALIAS(ncclCommSplit)

NCW_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                        ncclComm_t* newcomm, ncclConfig_t* config, int /*shrinkFlags*/) {
    Comm* c = from_handle(comm, "CommShrink");
    if (c == nullptr) return ncclInvalidArgument;
    if (newcomm == nullptr) return invalid("CommShrink: newcomm is NULL");
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
        return invalid("CommShrink: bad exclude list");
    }
    return shrink(c, excludeRanksList, excludeRanksCount, config, newcomm);
}
NCW_ALIAS(ncclCommShrink)

NCW_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
    // Operations complete before their call returns, so there is nothing left to flush.
    return from_handle(comm, "CommFinalize") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommFinalize)

NCW_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
    if (comm == nullptr) return ncclSuccess;  // like NCCL
    Comm* c = from_handle(comm, "CommDestroy");
    return c != nullptr ? destroy_comm(c) : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommDestroy)

NCW_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
    if (comm == nullptr) return ncclSuccess;  // like NCCL
    Comm* c = from_handle(comm, "CommAbort");
    return c != nullptr ? abort_comm(c) : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommAbort)

NCW_EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
    Comm* c = from_handle(comm, "CommRevoke");
    if (c == nullptr) return ncclInvalidArgument;
    if (revokeFlags != NCCL_REVOKE_DEFAULT) return invalid("CommRevoke: revokeFlags must be 0");
    return revoke_comm(c);
}
NCW_ALIAS(ncclCommRevoke)

NCW_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    Comm* c = from_handle(comm, "CommGetAsyncError");
    if (c == nullptr) return ncclInvalidArgument;
    if (asyncError == nullptr) return invalid("CommGetAsyncError: asyncError is NULL");
    check_peers(c);
    *asyncError = c->aborted.load() ? ncclSystemError : static_cast<ncclResult_t>(c->async_error.load());
    return ncclSuccess;
}
NCW_ALIAS(ncclCommGetAsyncError)

NCW_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
    Comm* c = from_handle(comm, "CommCount");
    if (c == nullptr) return ncclInvalidArgument;
    if (count == nullptr) return invalid("CommCount: count is NULL");
    *count = c->nranks;
    return ncclSuccess;
}
NCW_ALIAS(ncclCommCount)

NCW_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
    Comm* c = from_handle(comm, "CommCuDevice");
    if (c == nullptr) return ncclInvalidArgument;
    if (device == nullptr) return invalid("CommCuDevice: device is NULL");
    *device = c->device;
    return ncclSuccess;
}
NCW_ALIAS(ncclCommCuDevice)

NCW_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
    Comm* c = from_handle(comm, "CommUserRank");
    if (c == nullptr) return ncclInvalidArgument;
    if (rank == nullptr) return invalid("CommUserRank: rank is NULL");
    *rank = c->rank;
    return ncclSuccess;
}
NCW_ALIAS(ncclCommUserRank)

NCW_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
    switch (result) {  // the real library's strings
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}
NCW_ALIAS(ncclGetErrorString)

NCW_EXPORT const char* pncclGetLastError(ncclComm_t /*comm*/) { return last_error(); }
NCW_ALIAS(ncclGetLastError)

// Deprecated in nccl.h (hence the pragma), but still exported by 2.28.9.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
NCW_EXPORT void pncclResetDebugInit() {}
NCW_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop

NCW_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t /*size*/, void** handle) {
    if (from_handle(comm, "CommRegister") == nullptr) return ncclInvalidArgument;
    if (handle == nullptr) return invalid("CommRegister: handle is NULL");
    *handle = buff;
    return ncclSuccess;
}
NCW_ALIAS(ncclCommRegister)

NCW_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* /*handle*/) {
    return from_handle(comm, "CommDeregister") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommDeregister)

NCW_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t /*size*/, ncclWindow_t* win,
                                                int /*winFlags*/) {
    if (from_handle(comm, "CommWindowRegister") == nullptr) return ncclInvalidArgument;
    if (win == nullptr) return invalid("CommWindowRegister: win is NULL");
    *win = static_cast<ncclWindow_t>(buff);  // an opaque token; never dereferenced
    return ncclSuccess;
}
NCW_ALIAS(ncclCommWindowRegister)

NCW_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t /*win*/) {
    return from_handle(comm, "CommWindowDeregister") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommWindowDeregister)

NCW_EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
    if (ptr == nullptr) return invalid("MemAlloc: ptr is NULL");
    *ptr = std::malloc(size == 0 ? 1 : size);
    return *ptr != nullptr ? ncclSuccess : report(ncclSystemError, "MemAlloc: out of memory");
}
NCW_ALIAS(ncclMemAlloc)

NCW_EXPORT ncclResult_t pncclMemFree(void* ptr) {
    std::free(ptr);
    return ncclSuccess;
}
NCW_ALIAS(ncclMemFree)

NCW_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* /*scalar*/, ncclDataType_t /*datatype*/,
                                                  ncclScalarResidence_t /*residence*/, ncclComm_t comm) {
    static std::atomic<int> next{0};
    if (from_handle(comm, "RedOpCreatePreMulSum") == nullptr) return ncclInvalidArgument;
    if (op == nullptr) return invalid("RedOpCreatePreMulSum: op is NULL");
    *op = static_cast<ncclRedOp_t>(ncclNumOps + next.fetch_add(1) % 1000);  // dynamic ops start at ncclNumOps
    return ncclSuccess;
}
NCW_ALIAS(ncclRedOpCreatePreMulSum)

NCW_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t /*op*/, ncclComm_t comm) {
    return from_handle(comm, "RedOpDestroy") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclRedOpDestroy)

NCW_EXPORT ncclResult_t pncclAllReduce(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                                       ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "AllReduce", count, datatype, stream);
}
NCW_ALIAS(ncclAllReduce)

NCW_EXPORT ncclResult_t pncclBroadcast(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                       ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "Broadcast", count, datatype, stream, root);
}
NCW_ALIAS(ncclBroadcast)

NCW_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
    // Through the exported, interposable symbol (a PLT call), as the real library does: a preloaded wrapper of
    // ncclBroadcast sees this nested call.
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
NCW_ALIAS(ncclBcast)

NCW_EXPORT ncclResult_t pncclReduce(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "Reduce", count, datatype, stream, root);
}
NCW_ALIAS(ncclReduce)

NCW_EXPORT ncclResult_t pncclAllGather(const void*, void*, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
    return collective(comm, "AllGather", count, datatype, stream);
}
NCW_ALIAS(ncclAllGather)

NCW_EXPORT ncclResult_t pncclReduceScatter(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                                           ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "ReduceScatter", count, datatype, stream);
}
NCW_ALIAS(ncclReduceScatter)

NCW_EXPORT ncclResult_t pncclAlltoAll(const void*, void*, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream) {
    return collective(comm, "AlltoAll", count, datatype, stream);
}
NCW_ALIAS(ncclAlltoAll)

NCW_EXPORT ncclResult_t pncclGather(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "Gather", count, datatype, stream, root);
}
NCW_ALIAS(ncclGather)

NCW_EXPORT ncclResult_t pncclScatter(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
    return collective(comm, "Scatter", count, datatype, stream, root);
}
NCW_ALIAS(ncclScatter)

NCW_EXPORT ncclResult_t pncclSend(const void*, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
    return p2p(comm, OpKind::Send, count, datatype, peer, stream);
}
NCW_ALIAS(ncclSend)

NCW_EXPORT ncclResult_t pncclRecv(void*, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
    return p2p(comm, OpKind::Recv, count, datatype, peer, stream);
}
NCW_ALIAS(ncclRecv)

NCW_EXPORT ncclResult_t pncclGroupStart() { return group_start(); }
NCW_ALIAS(ncclGroupStart)

NCW_EXPORT ncclResult_t pncclGroupEnd() { return group_end(); }
NCW_ALIAS(ncclGroupEnd)

NCW_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
    if (simInfo != nullptr) simInfo->estimatedTime = 0.0f;
    return group_simulate_end();
}
NCW_ALIAS(ncclGroupSimulateEnd)

// ---- NCCL 2.29: a communicator's unique id for growing it, and one-sided communication into registered windows ----

NCW_EXPORT ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
    if (from_handle(comm, "CommGetUniqueId") == nullptr) return ncclInvalidArgument;
    if (uniqueId == nullptr) return invalid("CommGetUniqueId: uniqueId is NULL");
    return new_unique_id(uniqueId);
}
NCW_ALIAS(ncclCommGetUniqueId)

NCW_EXPORT ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
    if (from_handle(comm, "WinGetUserPtr") == nullptr) return ncclInvalidArgument;
    if (outUserPtr == nullptr) return invalid("WinGetUserPtr: outUserPtr is NULL");
    *outUserPtr = static_cast<void*>(win);  // CommWindowRegister's token is the buffer itself
    return ncclSuccess;
}
NCW_ALIAS(ncclWinGetUserPtr)

NCW_EXPORT ncclResult_t pncclCommGrow(ncclComm_t /*comm*/, int /*nRanks*/, const ncclUniqueId* /*uniqueId*/,
                                      int /*rank*/, ncclComm_t* newcomm, ncclConfig_t* /*config*/) {
    if (newcomm != nullptr) *newcomm = nullptr;
    // New ranks joining a live segment would need a segment that grows; no test needs one yet.
    return report(ncclInvalidUsage, "CommGrow: the test NCCL does not grow communicators");
}
NCW_ALIAS(ncclCommGrow)

NCW_EXPORT ncclResult_t pncclPutSignal(const void* /*localbuff*/, size_t /*count*/, ncclDataType_t /*datatype*/,
                                       int peer, ncclWindow_t /*peerWin*/, size_t /*peerWinOffset*/, int /*sigIdx*/,
                                       int /*ctx*/, unsigned int /*flags*/, ncclComm_t comm, cudaStream_t /*stream*/) {
    return one_sided(comm, peer, "PutSignal");
}
NCW_ALIAS(ncclPutSignal)

NCW_EXPORT ncclResult_t pncclSignal(int peer, int /*sigIdx*/, int /*ctx*/, unsigned int /*flags*/, ncclComm_t comm,
                                    cudaStream_t /*stream*/) {
    return one_sided(comm, peer, "Signal");
}
NCW_ALIAS(ncclSignal)

NCW_EXPORT ncclResult_t pncclWaitSignal(int nDesc, ncw_wait_signal_desc_t* signalDescs, ncclComm_t comm,
                                        cudaStream_t /*stream*/) {
    if (nDesc < 0 || (nDesc > 0 && signalDescs == nullptr)) return invalid("WaitSignal: bad descriptors");
    if (from_handle(comm, "WaitSignal") == nullptr) return group_error(ncclInvalidArgument);
    for (int i = 0; i < nDesc; ++i) {
        const auto& d = reinterpret_cast<const ncw::nccl_abi::WaitSignalDesc*>(signalDescs)[i];
        if (ncclResult_t r = one_sided(comm, d.peer, "WaitSignal"); r != ncclSuccess) return r;
    }
    return ncclSuccess;
}
NCW_ALIAS(ncclWaitSignal)

// ---- NCCL 2.29.7: a communicator's resources released and taken back (nothing to release here) ----

NCW_EXPORT ncclResult_t pncclCommSuspend(ncclComm_t comm, int /*flags*/) {
    return from_handle(comm, "CommSuspend") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommSuspend)

NCW_EXPORT ncclResult_t pncclCommResume(ncclComm_t comm) {
    return from_handle(comm, "CommResume") != nullptr ? ncclSuccess : ncclInvalidArgument;
}
NCW_ALIAS(ncclCommResume)

// ---- NCCL 2.31: the collectives with a per-call configuration, each its plain form (NULL: the plain call itself),
// its userProfilerTag passed to the profiler's v7 descriptors ----

NCW_EXPORT ncclResult_t pncclAllReduceConfig(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                                             ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "AllReduceConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "AllReduce", count, datatype, stream, 0, tag);
}
NCW_ALIAS(ncclAllReduceConfig)

NCW_EXPORT ncclResult_t pncclBroadcastConfig(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                             ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "BroadcastConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "Broadcast", count, datatype, stream, root, tag);
}
NCW_ALIAS(ncclBroadcastConfig)

NCW_EXPORT ncclResult_t pncclReduceConfig(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                                          int root, ncclComm_t comm, cudaStream_t stream,
                                          const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "ReduceConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "Reduce", count, datatype, stream, root, tag);
}
NCW_ALIAS(ncclReduceConfig)

NCW_EXPORT ncclResult_t pncclAllGatherConfig(const void*, void*, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                             cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "AllGatherConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "AllGather", count, datatype, stream, 0, tag);
}
NCW_ALIAS(ncclAllGatherConfig)

NCW_EXPORT ncclResult_t pncclReduceScatterConfig(const void*, void*, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                                                 ncclComm_t comm, cudaStream_t stream,
                                                 const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "ReduceScatterConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "ReduceScatter", count, datatype, stream, 0, tag);
}
NCW_ALIAS(ncclReduceScatterConfig)

NCW_EXPORT ncclResult_t pncclAlltoAllConfig(const void*, void*, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "AlltoAllConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "AlltoAll", count, datatype, stream, 0, tag);
}
NCW_ALIAS(ncclAlltoAllConfig)

NCW_EXPORT ncclResult_t pncclGatherConfig(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                          ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "GatherConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "Gather", count, datatype, stream, root, tag);
}
NCW_ALIAS(ncclGatherConfig)

NCW_EXPORT ncclResult_t pncclScatterConfig(const void*, void*, size_t count, ncclDataType_t datatype, int root,
                                           ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config) {
    uint64_t tag = 0;
    if (ncclResult_t r = read_config(config, "ScatterConfig", tag); r != ncclSuccess) return r;
    return collective(comm, "Scatter", count, datatype, stream, root, tag);
}
NCW_ALIAS(ncclScatterConfig)

// NCCL entry points newer than the nccl.h the shim is built against (2.28.9): our own declarations, written from the
// ABI of NCCL's public headers (2.29.2 to 2.32.3; nothing here is copied from them). A build against a newer nccl.h
// takes NCCL's own (NCCL_VERSION_CODE). The API table (api_table.h) names each with the version that introduced it.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace ncw::nccl_abi {

inline constexpr unsigned kApiMagic = 0xcafebeef;  // NCCL_API_MAGIC: the magic of every versioned NCCL struct

// ncclCollConfig_t (2.31; versioned and append-only: size, magic and version come first, and 2.32 appends
// launchCompletionEvent). Read only as far as its `size` says, and only when its magic is NCCL's.
struct CollConfig {
    size_t size;
    unsigned magic;
    unsigned version;
    void* ext;  // ncclConfigExt_t*: vendor options
    int min_ctas;
    int max_ctas;
    int nvls_ctas;
    int cga_cluster_size;
    const char* alg_selection;  // NULL or "": automatic
    int force_alg_selection;
    int cta_policy;
    uint64_t user_profiler_tag;     // passed verbatim to the profiler plugin (v7's userTag); 0: none
    void* launch_completion_event;  // 2.32: a cudaEvent_t recorded when the kernel has launched (not completed)
};
static_assert(offsetof(CollConfig, alg_selection) == 40 && offsetof(CollConfig, user_profiler_tag) == 56 &&
              offsetof(CollConfig, launch_completion_event) == 64);

// ncclWaitSignalDesc_t (2.29): wait until opCnt signals from peer on signal sigIdx of context ctx have arrived.
struct WaitSignalDesc {
    int op_cnt;
    int peer;
    int sig_idx;
    int ctx;
};

}  // namespace ncw::nccl_abi

#if NCCL_VERSION_CODE >= 23100
using ncw_coll_config_t = ncclCollConfig_t;
#else
using ncw_coll_config_t = ncw::nccl_abi::CollConfig;
#endif
#if NCCL_VERSION_CODE >= 22900
using ncw_wait_signal_desc_t = ncclWaitSignalDesc_t;
#else
using ncw_wait_signal_desc_t = ncw::nccl_abi::WaitSignalDesc;
#endif

extern "C" {
#if NCCL_VERSION_CODE < 22900
// 2.29.2: growing a communicator, and one-sided communication into a peer's registered window.
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                          ncclConfig_t* config);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
                           size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncw_wait_signal_desc_t* signalDescs, ncclComm_t comm, cudaStream_t stream);
// 2.29.7: a communicator's resources released and taken back.
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
#endif
#if NCCL_VERSION_CODE < 23100
// 2.31.2: every collective with a per-call configuration (NULL: the plain call).
ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
                              const ncw_coll_config_t* config);
ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                 ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
                                     const ncw_coll_config_t* config);
ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                               ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config);
#endif
}

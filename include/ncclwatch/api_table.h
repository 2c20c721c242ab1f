// The intercepted NCCL API, in one table. shim/intercept/wrappers.cpp expands it into the exported wrappers and
// shim/base/resolver.cpp into the table of real function pointers; the version script lists the same names.
// Signatures are nccl.h's (NCCL 2.28.9), and for the entry points of later versions our own declarations
// (nccl_newer_api.h, which every expansion that uses the parameters includes); ncclUniqueId is passed by value.
//
// SINCE is the NCCL_VERSION_CODE of the first release that has the entry point (0: 2.21 or earlier, every version
// ncclwatch supports). An entry point the loaded NCCL lacks is never looked up again once missed, and costs nothing.
//
// Adding a function is one line in the right list:
//   NCW_NCCL_OPS:      operations that take a sequence number. X(name, SINCE, (params), (args), (OpDesc initializer))
//   NCW_NCCL_CONFIG_OPS: the same operations with a per-call ncclCollConfig_t (2.31), recorded exactly as the plain
//                      form (PLAIN). Where the loaded NCCL lacks one, the call goes to PLAIN without the config (NCCL:
//                      "config == NULL is equivalent to the plain API"), so a program that found our export of it
//                      still runs. X(name, SINCE, PLAIN, (params), (args), (plain args), (OpDesc initializer))
//   NCW_NCCL_HOOKED:   group, lifecycle and one-sided calls with a hand-written hook ncw::hook::<name>(real, args...).
//                      X(name, SINCE, (params), (args))
//   NCW_NCCL_INTERNAL: functions the shim calls itself but does not intercept or export. X(name)
//   NCW_PROFILER_VERSIONS: the profiler-plugin tables exported beside the wrappers. X(N)
//   NCW_CUDART_HOOKED: the CUDA runtime's graph calls, so that a launch of a graph that holds captured NCCL ops is
//                      recorded as those ops (shim/intercept/graph_hooks.cpp); its synchronisations, events and
//                      stream waits, whose return proves NCCL's ops complete (shim/intercept/sync_hooks.cpp,
//                      shim/record/sync_proofs.h). X(name, (params), (args)); each
//                      returns cudaError_t (an int: our declarations, from the runtime's ABI). Handles are opaque
//                      pointers. cudaGraphInstantiate passes five register-sized arguments on: CUDA 11's has five,
//                      12's three, and only the first two (the same in both) are read.
#pragma once
// clang-format off

#define NCW_NCCL_OPS(X)                                                                                                \
    X(ncclAllReduce, 0,                                                                                                \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,   \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, count, datatype, op, comm, stream),                                                         \
      (AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream))                                          \
    X(ncclBroadcast, 0,                                                                                                \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Broadcast, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                        \
    X(ncclBcast, 0,                                                                                                  \
      (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),          \
      (buff, count, datatype, root, comm, stream), (Broadcast, buff, buff, count, datatype, -1, root, comm, stream))   \
    X(ncclReduce, 0,                                                                                                   \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,          \
       ncclComm_t comm, cudaStream_t stream),                                                                          \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream),                                                   \
      (Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                           \
    X(ncclAllGather, 0,                                                                                                \
      (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,               \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream),                                                         \
      (AllGather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream))                                      \
    X(ncclReduceScatter, 0,                                                                                            \
      (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,                \
       ncclComm_t comm, cudaStream_t stream),                                                                          \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),                                                     \
      (ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream))                                  \
    X(ncclAlltoAll, 22803,                                                                                             \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                   \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, count, datatype, comm, stream),                                                             \
      (AlltoAll, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream))                                           \
    X(ncclGather, 22803,                                                                                               \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Gather, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                           \
    X(ncclScatter, 22803,                                                                                              \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream),                                                                                           \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Scatter, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                          \
    X(ncclSend, 0, (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,            \
                 cudaStream_t stream),                                                                                 \
      (sendbuff, count, datatype, peer, comm, stream),                                                                 \
      (Send, sendbuff, nullptr, count, datatype, -1, peer, comm, stream))                                              \
    X(ncclRecv, 0, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,                  \
                 cudaStream_t stream),                                                                                 \
      (recvbuff, count, datatype, peer, comm, stream),                                                                 \
      (Recv, nullptr, recvbuff, count, datatype, -1, peer, comm, stream))

#define NCW_NCCL_CONFIG_OPS(X)                                                                                         \
    X(ncclAllReduceConfig, 23102, ncclAllReduce,                                                                       \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,   \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, count, datatype, op, comm, stream, config),                                                 \
      (sendbuff, recvbuff, count, datatype, op, comm, stream),                                                         \
      (AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream))                                          \
    X(ncclBroadcastConfig, 23102, ncclBroadcast,                                                                       \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, count, datatype, root, comm, stream, config),                                               \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Broadcast, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                        \
    X(ncclReduceConfig, 23102, ncclReduce,                                                                             \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,          \
       ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config),                                         \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream, config),                                           \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream),                                                   \
      (Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                           \
    X(ncclAllGatherConfig, 23102, ncclAllGather,                                                                       \
      (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,               \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream, config),                                                 \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream),                                                         \
      (AllGather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream))                                      \
    X(ncclReduceScatterConfig, 23102, ncclReduceScatter,                                                               \
      (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,                \
       ncclComm_t comm, cudaStream_t stream, const ncw_coll_config_t* config),                                         \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream, config),                                             \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),                                                     \
      (ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream))                                  \
    X(ncclAlltoAllConfig, 23102, ncclAlltoAll,                                                                         \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                   \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, count, datatype, comm, stream, config),                                                     \
      (sendbuff, recvbuff, count, datatype, comm, stream),                                                             \
      (AlltoAll, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream))                                           \
    X(ncclGatherConfig, 23102, ncclGather,                                                                             \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, count, datatype, root, comm, stream, config),                                               \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Gather, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                           \
    X(ncclScatterConfig, 23102, ncclScatter,                                                                           \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,         \
       cudaStream_t stream, const ncw_coll_config_t* config),                                                          \
      (sendbuff, recvbuff, count, datatype, root, comm, stream, config),                                               \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                       \
      (Scatter, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))

#define NCW_NCCL_HOOKED(X)                                                                                             \
    X(ncclGroupStart, 0, (), ())                                                                                       \
    X(ncclGroupEnd, 0, (), ())                                                                                         \
    X(ncclGroupSimulateEnd, 22203, (ncclSimInfo_t * simInfo), (simInfo))                                               \
    X(ncclGetUniqueId, 0, (ncclUniqueId * uniqueId), (uniqueId))                                                       \
    X(ncclCommInitRank, 0, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),                           \
      (comm, nranks, commId, rank))                                                                                  \
    X(ncclCommInitRankConfig, 0, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), \
      (comm, nranks, commId, rank, config))                                                                            \
    X(ncclCommInitAll, 0, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))                    \
    X(ncclCommInitRankScalable, 22304,                                                                                 \
      (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),            \
      (newcomm, nranks, myrank, nId, commIds, config))                                                                 \
    X(ncclCommSplit, 0, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),              \
      (comm, color, key, newcomm, config))                                                                             \
    X(ncclCommShrink, 22703,                                                                                           \
      (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,       \
       int shrinkFlags),                                                                                               \
      (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                                       \
    X(ncclCommFinalize, 0, (ncclComm_t comm), (comm))                                                                  \
    X(ncclCommDestroy, 0, (ncclComm_t comm), (comm))                                                                   \
    X(ncclCommAbort, 0, (ncclComm_t comm), (comm))                                                                     \
    X(ncclCommRevoke, 22807, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                                  \
    X(ncclCommGetAsyncError, 0, (ncclComm_t comm, ncclResult_t * asyncError), (comm, asyncError))                      \
    X(ncclCommGrow, 22902,                                                                                             \
      (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,                       \
       ncclConfig_t* config),                                                                                          \
      (comm, nRanks, uniqueId, rank, newcomm, config))                                                                 \
    X(ncclCommSuspend, 22907, (ncclComm_t comm, int flags), (comm, flags))                                             \
    X(ncclCommResume, 22907, (ncclComm_t comm), (comm))                                                                \
    X(ncclPutSignal, 22902,                                                                                            \
      (const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,                   \
       size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream),           \
      (localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream))                    \
    X(ncclSignal, 22902, (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream),    \
      (peer, sigIdx, ctx, flags, comm, stream))                                                                        \
    X(ncclWaitSignal, 22902,                                                                                           \
      (int nDesc, ncw_wait_signal_desc_t* signalDescs, ncclComm_t comm, cudaStream_t stream),                          \
      (nDesc, signalDescs, comm, stream))

#define NCW_NCCL_INTERNAL(X)                                                                                           \
    X(ncclGetVersion)                                                                                                  \
    X(ncclCommCount)                                                                                                   \
    X(ncclCommUserRank)                                                                                                \
    X(ncclCommCuDevice)                                                                                                \
    X(ncclGetErrorString)

// NCCL's profiler-plugin tables the shim exports, as ncclProfiler_v<N> (include/ncclwatch/nccl_profiler_abi.h declares
// them; shim/intercept/profiler_exports.cpp defines them). X(N)
#define NCW_PROFILER_VERSIONS(X) X(3) X(4) X(5) X(6) X(7)

// NCCL versions whose profiler costs the job much more with our events on than without: the shim asks them for
// none (GPU progress then comes from CUDA events) and says why once (NCCLWATCH_LOG_LEVEL=debug shows it).
// X(first, last, why), first and last each an NCCL_VERSION_CODE.
#define NCW_PROFILER_REGRESSIONS(X)                                                                                  \
    X(23100, 23199,                                                                                                  \
      "with kernel-channel events on, NCCL 2.31 also writes kernel-phase timestamps behind a system fence "          \
      "(NVIDIA/nccl#2355: 10.5 % on a 1 MB all_reduce, 0.4 % in 2.29)")

#define NCW_CUDART_HOOKED(X)                                                                                           \
    X(cudaGraphInstantiate, (void** exec, void* graph, uintptr_t a2, uintptr_t a3, uintptr_t a4),                      \
      (exec, graph, a2, a3, a4))                                                                                       \
    X(cudaGraphInstantiateWithFlags, (void** exec, void* graph, unsigned long long flags), (exec, graph, flags))       \
    X(cudaGraphInstantiateWithParams, (void** exec, void* graph, void* params), (exec, graph, params))                 \
    X(cudaGraphLaunch, (void* exec, cudaStream_t stream), (exec, stream))                                              \
    X(cudaGraphLaunch_ptsz, (void* exec, cudaStream_t stream), (exec, stream))                                         \
    X(cudaGraphExecDestroy, (void* exec), (exec))                                                                      \
    X(cudaGraphDestroy, (void* graph), (graph))                                                                        \
    X(cudaStreamSynchronize, (cudaStream_t stream), (stream))                                                          \
    X(cudaStreamSynchronize_ptsz, (cudaStream_t stream), (stream))                                                     \
    X(cudaStreamQuery, (cudaStream_t stream), (stream))                                                                \
    X(cudaStreamQuery_ptsz, (cudaStream_t stream), (stream))                                                           \
    X(cudaEventSynchronize, (void* event), (event))                                                                    \
    X(cudaEventQuery, (void* event), (event))                                                                          \
    X(cudaDeviceSynchronize, (), ())                                                                                   \
    X(cudaEventRecord, (void* event, cudaStream_t stream), (event, stream))                                            \
    X(cudaEventRecord_ptsz, (void* event, cudaStream_t stream), (event, stream))                                       \
    X(cudaEventRecordWithFlags, (void* event, cudaStream_t stream, unsigned int flags), (event, stream, flags))        \
    X(cudaEventRecordWithFlags_ptsz, (void* event, cudaStream_t stream, unsigned int flags), (event, stream, flags))   \
    X(cudaStreamWaitEvent, (cudaStream_t stream, void* event, unsigned int flags), (stream, event, flags))             \
    X(cudaStreamWaitEvent_ptsz, (cudaStream_t stream, void* event, unsigned int flags), (stream, event, flags))        \
    X(cudaStreamDestroy, (cudaStream_t stream), (stream))
// clang-format on

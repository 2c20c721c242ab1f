// The intercepted NCCL API, in one table. shim/intercept/wrappers.cpp expands it into the exported wrappers and
// shim/base/resolver.cpp into the table of real function pointers; the version script lists the same names.
// Signatures are nccl.h's (NCCL 2.28.9); ncclUniqueId is passed by value.
//
// Adding a function is one line in the right list:
//   NCW_NCCL_OPS:      operations that take a sequence number. X(name, (params), (args), (OpDesc initializer))
//   NCW_NCCL_HOOKED:   group and lifecycle calls with a hand-written hook ncw::hook::<name>(real, args...).
//                      X(name, (params), (args))
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

#define NCW_NCCL_OPS(X)                                                                                              \
    X(ncclAllReduce,                                                                                                 \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, op, comm, stream),                                                      \
      (AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream))                                       \
    X(ncclBroadcast,                                                                                                 \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                    \
      (Broadcast, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                     \
    X(ncclBcast, (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), \
      (buff, count, datatype, root, comm, stream), (Broadcast, buff, buff, count, datatype, -1, root, comm, stream)) \
    X(ncclReduce,                                                                                                    \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,       \
       ncclComm_t comm, cudaStream_t stream),                                                                        \
      (sendbuff, recvbuff, count, datatype, op, root, comm, stream),                                                \
      (Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream))                                        \
    X(ncclAllGather,                                                                                                 \
      (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,            \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, sendcount, datatype, comm, stream),                                                      \
      (AllGather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream))                                   \
    X(ncclReduceScatter,                                                                                             \
      (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,             \
       ncclComm_t comm, cudaStream_t stream),                                                                        \
      (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),                                                  \
      (ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream))                               \
    X(ncclAlltoAll,                                                                                                  \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,                \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, comm, stream),                                                          \
      (AlltoAll, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream))                                        \
    X(ncclGather,                                                                                                    \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                    \
      (Gather, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                        \
    X(ncclScatter,                                                                                                   \
      (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,      \
       cudaStream_t stream),                                                                                         \
      (sendbuff, recvbuff, count, datatype, root, comm, stream),                                                    \
      (Scatter, sendbuff, recvbuff, count, datatype, -1, root, comm, stream))                                       \
    X(ncclSend, (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,             \
                 cudaStream_t stream),                                                                               \
      (sendbuff, count, datatype, peer, comm, stream),                                                              \
      (Send, sendbuff, nullptr, count, datatype, -1, peer, comm, stream))                                           \
    X(ncclRecv, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,                   \
                 cudaStream_t stream),                                                                               \
      (recvbuff, count, datatype, peer, comm, stream),                                                              \
      (Recv, nullptr, recvbuff, count, datatype, -1, peer, comm, stream))

#define NCW_NCCL_HOOKED(X)                                                                                           \
    X(ncclGroupStart, (), ())                                                                                        \
    X(ncclGroupEnd, (), ())                                                                                          \
    X(ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo), (simInfo))                                                    \
    X(ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                                                        \
    X(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank), (comm, nranks, commId, rank)) \
    X(ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), \
      (comm, nranks, commId, rank, config))                                                                          \
    X(ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))                     \
    X(ncclCommInitRankScalable,                                                                                      \
      (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config),         \
      (newcomm, nranks, myrank, nId, commIds, config))                                                               \
    X(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),              \
      (comm, color, key, newcomm, config))                                                                           \
    X(ncclCommShrink,                                                                                                \
      (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,    \
       int shrinkFlags),                                                                                             \
      (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags))                                     \
    X(ncclCommFinalize, (ncclComm_t comm), (comm))                                                                   \
    X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                                    \
    X(ncclCommAbort, (ncclComm_t comm), (comm))                                                                      \
    X(ncclCommRevoke, (ncclComm_t comm, int revokeFlags), (comm, revokeFlags))                                       \
    X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError), (comm, asyncError))

#define NCW_NCCL_INTERNAL(X)                                                                                         \
    X(ncclGetVersion)                                                                                                \
    X(ncclCommCount)                                                                                                 \
    X(ncclCommUserRank)                                                                                              \
    X(ncclCommCuDevice)                                                                                              \
    X(ncclGetErrorString)

// NCCL's profiler-plugin tables the shim exports, as ncclProfiler_v<N> (include/ncclwatch/nccl_profiler_abi.h declares
// them; shim/intercept/profiler_exports.cpp defines them). X(N)
#define NCW_PROFILER_VERSIONS(X) X(3) X(4) X(5) X(6)

#define NCW_CUDART_HOOKED(X)                                                                                         \
    X(cudaGraphInstantiate, (void** exec, void* graph, uintptr_t a2, uintptr_t a3, uintptr_t a4),                    \
      (exec, graph, a2, a3, a4))                                                                                     \
    X(cudaGraphInstantiateWithFlags, (void** exec, void* graph, unsigned long long flags), (exec, graph, flags))    \
    X(cudaGraphInstantiateWithParams, (void** exec, void* graph, void* params), (exec, graph, params))             \
    X(cudaGraphLaunch, (void* exec, cudaStream_t stream), (exec, stream))                                            \
    X(cudaGraphLaunch_ptsz, (void* exec, cudaStream_t stream), (exec, stream))                                       \
    X(cudaGraphExecDestroy, (void* exec), (exec))                                                                    \
    X(cudaGraphDestroy, (void* graph), (graph))                                                                      \
    X(cudaStreamSynchronize, (cudaStream_t stream), (stream))                                                        \
    X(cudaStreamSynchronize_ptsz, (cudaStream_t stream), (stream))                                                   \
    X(cudaStreamQuery, (cudaStream_t stream), (stream))                                                              \
    X(cudaStreamQuery_ptsz, (cudaStream_t stream), (stream))                                                         \
    X(cudaEventSynchronize, (void* event), (event))                                                                  \
    X(cudaEventQuery, (void* event), (event))                                                                        \
    X(cudaDeviceSynchronize, (), ())                                                                                 \
    X(cudaEventRecord, (void* event, cudaStream_t stream), (event, stream))                                          \
    X(cudaEventRecord_ptsz, (void* event, cudaStream_t stream), (event, stream))                                     \
    X(cudaEventRecordWithFlags, (void* event, cudaStream_t stream, unsigned int flags), (event, stream, flags))     \
    X(cudaEventRecordWithFlags_ptsz, (void* event, cudaStream_t stream, unsigned int flags), (event, stream, flags)) \
    X(cudaStreamWaitEvent, (cudaStream_t stream, void* event, unsigned int flags), (stream, event, flags))          \
    X(cudaStreamWaitEvent_ptsz, (cudaStream_t stream, void* event, unsigned int flags), (stream, event, flags))     \
    X(cudaStreamDestroy, (cudaStream_t stream), (stream))
// clang-format on

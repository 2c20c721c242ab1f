// Hand-written hooks for the NCW_NCCL_HOOKED part of the API table: groups and communicator lifecycle. Each calls
// the real function exactly once through `real` and returns its result.
#pragma once

#include <nccl.h>

#include "call_scope.h"

namespace ncw::hook {

ncclResult_t ncclGroupStart(CallScope& s);
ncclResult_t ncclGroupEnd(CallScope& s);
ncclResult_t ncclGroupSimulateEnd(CallScope& s, ncclSimInfo_t* simInfo);
ncclResult_t ncclGetUniqueId(CallScope& s, ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(CallScope& s, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(CallScope& s, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommInitAll(CallScope& s, ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t ncclCommInitRankScalable(CallScope& s, ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t ncclCommSplit(CallScope& s, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t ncclCommShrink(CallScope& s, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t ncclCommFinalize(CallScope& s, ncclComm_t comm);
ncclResult_t ncclCommDestroy(CallScope& s, ncclComm_t comm);
ncclResult_t ncclCommAbort(CallScope& s, ncclComm_t comm);
ncclResult_t ncclCommRevoke(CallScope& s, ncclComm_t comm, int revokeFlags);
ncclResult_t ncclCommGetAsyncError(CallScope& s, ncclComm_t comm, ncclResult_t* asyncError);

}  // namespace ncw::hook

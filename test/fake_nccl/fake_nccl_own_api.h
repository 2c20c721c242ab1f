// The test NCCL's exports that the API table (include/ncclwatch/api_table.h) does not name: NCCL functions the shim
// neither intercepts nor calls, which a program may still call. With the table, they make each version's export list
// (fake_nccl_mapgen.cpp writes it; test/e2e/nccl_versions.sh reads this list with grep, so one X(...) a line).
// X(name, SINCE): SINCE is the NCCL_VERSION_CODE of the first release that has it, 0 for 2.21 or earlier.
#pragma once
// clang-format off

#define FAKE_NCCL_OWN_API(X)                                                                                           \
    X(ncclGetLastError, 0)                                                                                             \
    X(ncclCommRegister, 0)                                                                                             \
    X(ncclCommDeregister, 0)                                                                                           \
    X(ncclMemAlloc, 0)                                                                                                 \
    X(ncclMemFree, 0)                                                                                                  \
    X(ncclRedOpCreatePreMulSum, 0)                                                                                     \
    X(ncclRedOpDestroy, 0)                                                                                             \
    X(ncclResetDebugInit, 22403)                                                                                       \
    X(ncclCommWindowRegister, 22703)                                                                                   \
    X(ncclCommWindowDeregister, 22703)                                                                                 \
    X(ncclCommGetUniqueId, 22902)                                                                                      \
    X(ncclWinGetUserPtr, 22902)

// clang-format on

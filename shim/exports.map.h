/* Preprocessed into the linker version script: the exported symbols are exactly the API table's wrappers. */
#include "ncclwatch/api_table.h"
// clang-format off
#define NCW_EXPORT_OP(name, params, args, desc) name;
#define NCW_EXPORT_HOOKED(name, params, args) name;
{
  global:
    NCW_NCCL_OPS(NCW_EXPORT_OP)
    NCW_NCCL_HOOKED(NCW_EXPORT_HOOKED)
  local: *;
};
// clang-format on

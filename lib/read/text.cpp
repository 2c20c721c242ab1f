#include "read/text.h"

#include <fmt/format.h>

namespace ncw::text {

std::string hex(uint64_t v) { return fmt::format("0x{:016x}", v); }

std::string hexs(uint64_t v) { return fmt::format("0x{:x}", v); }

const char* nccl_result_name(int32_t r, const char* unknown) {
    static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    return r >= 0 && r < 8 ? names[r] : unknown;
}

std::string nccl_version_str(int32_t code) {
    if (code <= 0) return "unknown";
    // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
    if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
    return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

}  // namespace ncw::text

// Which NCCL the test NCCL presents itself as. Its sources are compiled once; each variant (libnccl-2.31.so.2 & co,
// see meson.build) links them with its own fake_nccl_version.cpp, which says its NCCL_VERSION_CODE, and a version
// script that exports that version's entry points (fake_nccl_mapgen.cpp).
#pragma once

namespace ncw::fake {

// The NCCL_VERSION_CODE this library presents (ncclGetVersion's answer).
int version_code();

// The newest profiler-plugin table an NCCL of this code looks up, as NCCL tries newest first: 2.26 v3, 2.27 v4, 2.28
// v5, 2.29 and 2.30 v6, 2.31 and later v7; 0 before 2.26. (2.23 to 2.25 know v1 and v2, which the shim does not
// export: for its purposes they have none.)
constexpr int newest_profiler_version(int code) {
    return code >= 23100 ? 7 : code >= 22900 ? 6 : code >= 22800 ? 5 : code >= 22700 ? 4 : code >= 22600 ? 3 : 0;
}

}  // namespace ncw::fake

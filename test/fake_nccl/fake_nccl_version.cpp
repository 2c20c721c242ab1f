// The one per-variant object of the test NCCL: its NCCL_VERSION_CODE (meson.build compiles it once per variant with
// -DFAKE_NCCL_VERSION_CODE=N).
#include "fake_nccl_version.h"

#ifndef FAKE_NCCL_VERSION_CODE
#error "FAKE_NCCL_VERSION_CODE must name the NCCL version this variant presents (meson.build)"
#endif

namespace ncw::fake {

int version_code() { return FAKE_NCCL_VERSION_CODE; }

}  // namespace ncw::fake

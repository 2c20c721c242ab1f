// The ncclwatch version (meson's project version) and the git commit it was built from (vcs_tag at build time;
// "unknown" outside a git checkout). Defined in the generated version.cpp (include/ncclwatch/version.cpp.in), so a
// new commit recompiles one file. Printed by `--version`, written into the collector's JSON and the shim's first
// log line.
#pragma once

namespace ncw {

extern const char* const kVersion;  // "0.1.0"
extern const char* const kGitHash;  // "1a2b3c4" or "unknown"
// "0.1.0 (1a2b3c4)": what `--version` prints after "ncclwatch ", and the JSON's "ncclwatch_version".
extern const char* const kVersionLine;

}  // namespace ncw

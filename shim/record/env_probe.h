// The environment region's content (format 1.1): the variables a hang investigation needs, and facts probed once per
// process about which of them can have an effect. NCCL reads a variable by passing its name, a string literal, to
// getenv; so the names a library embeds as NUL-terminated strings are the names it can read (NCCL 2.28.9 embeds
// 219). A set NCCL_* variable that neither the loaded NCCL (nor its plugins, nor libtorch) embeds does nothing.
//
// The scan reads only the ELF sections a string literal can live in (allocated, not code, not CUDA fat binaries:
// 2 ms for NCCL 2.28.9's 218 MB library instead of 700 ms for the whole file), and still it runs once, on a thread of
// its own at low priority, after NCCL has been resolved: never on a training thread, never in a wrapper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "shim/record/process_identity.h"

namespace ncw {

struct Runtime;

namespace env_probe {

// A scan that finds fewer names than this in the main NCCL library (one built from source may assemble names at run
// time, a stripped stand-in may hold none) is "unknown": nothing is concluded from it.
inline constexpr size_t kMinNames = 20;
inline constexpr uint64_t kMaxLibraryBytes = 2ull << 30;
// Bytes of the environment region kept free for the facts when the variables are written first.
inline constexpr size_t kFactsReserve = 4096;

struct NameSets {
    std::set<std::string> nccl;        // NCCL_[A-Z0-9_]+
    std::set<std::string> torch_nccl;  // TORCH_NCCL_[A-Z0-9_]+
};

// Adds to `out` every environment variable name embedded in [data, data + size): a maximal run of [A-Z0-9_] that
// starts with NCCL_ or TORCH_NCCL_, does not end in '_' (a prefix the code completes at run time), is at most 128
// characters and is followed by a NUL. A run preceded by other letters ("please set NCCL_X") still counts: the
// linker may share the tail of a longer string for it.
void scan_names(const char* data, size_t size, NameSets& out);

struct LibraryScan {
    std::string path;
    std::string error;  // "" when the file was read
    NameSets names;
};

// Maps `path` read-only, scans it, unmaps it. Files over kMaxLibraryBytes are not read (error says so).
LibraryScan scan_library(const std::string& path);

// The distinct file paths in /proc/<pid>/maps text whose file name starts with one of `name_prefixes`, in order of
// first appearance.
std::vector<std::string> mapped_files(const std::string& maps_text, const std::vector<std::string>& name_prefixes);

// The "ncclwatch.*" facts for the variables `env`:
//   ncclwatch.nccl_library=PATH             the library the real NCCL functions came from
//   ncclwatch.nccl_plugins=PATH,...         NCCL plugins mapped in the process (their names count as read)
//   ncclwatch.nccl_reads=N                  NCCL_* names the library embeds; or
//   ncclwatch.nccl_scan=unknown: WHY        the scan failed or found fewer than kMinNames (then no no_effect)
//   ncclwatch.no_effect=NAME,...            set NCCL_* variables that nothing loaded reads (may be empty)
//   ncclwatch.torch_library=PATH,...        libtorch's libraries, when loaded
//   ncclwatch.torch_reads=N | ncclwatch.torch_scan=unknown: WHY
//   ncclwatch.torch_no_effect=NAME,...      set TORCH_NCCL_* variables libtorch never reads (may be empty)
// `nccl` is the main library's scan (path "" when not found), `plugins` NCCL's plugins, `torch` libtorch's.
std::vector<std::string> facts(const EnvList& env, const LibraryScan& nccl, const std::vector<LibraryScan>& plugins,
                               const std::vector<LibraryScan>& torch);

// "NAME=value" for each variable.
std::vector<std::string> env_entries(const EnvList& env);

// Once per process: starts the probe's thread, which scans the libraries and appends facts() to the rank file.
// Never throws; failures are logged once.
void start_env_probe(Runtime& rt);

}  // namespace env_probe
}  // namespace ncw

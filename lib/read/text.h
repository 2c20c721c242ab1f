// Small text helpers every layer above the reader uses (the engine's evidence lines, the reports, the shim's dumps).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ncw::text {

std::string hex(uint64_t v);   // 0x%016x
std::string hexs(uint64_t v);  // 0x%x

// nccl.h's name of an ncclResult_t value (NCCL 2.28.9), `unknown` for any other value. Kept here so nothing above
// the reader needs an NCCL header to name one.
const char* nccl_result_name(int32_t r, const char* unknown = "unknown ncclResult_t");
// Whether a result leaves the communicator broken (ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
// ncclRemoteError), as opposed to a call refused for its arguments or usage, after which it goes on. The one list of
// the shim (it stops counting completions) and the engine (such a rank proves nothing of its peers).
inline bool nccl_result_breaks_comm(int32_t r) { return r == 1 || r == 2 || r == 3 || r == 6; }

// NCCL_VERSION_CODE as "2.28.9"; "unknown" for 0 or less.
std::string nccl_version_str(int32_t code);

// A value from outside (an environment variable, say) fit to echo in one log line: control characters, backslashes
// and bytes >= 0x7f as \n, \t, \\, \xNN; at most max_chars characters of the value, then "... (N bytes)".
// EchoMode::Line, for a whole line already worded (the shim's log): only control characters are escaped (\r as well),
// UTF-8 and backslashes are kept as written, and a cut falls on a character's start.
enum class EchoMode { Value, Line };
std::string echo(std::string_view value, size_t max_chars = 200, EchoMode mode = EchoMode::Value);

// A wall-clock instant (ns since the Unix epoch) as RFC 3339 in local time with its zone, to the millisecond:
// "2026-11-30T04:12:07.123+00:00". The one format of every time a person or a program reads: the reports, the JSON
// documents, the shim's log prefix. "unknown time" for 0.
std::string rfc3339(uint64_t real_ns);

}  // namespace ncw::text

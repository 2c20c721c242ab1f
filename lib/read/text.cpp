#include "read/text.h"

#include <fmt/format.h>
#include <time.h>

namespace ncw::text {

std::string hex(uint64_t v) { return fmt::format("0x{:016x}", v); }

std::string hexs(uint64_t v) { return fmt::format("0x{:x}", v); }

std::string rfc3339(uint64_t real_ns) {
    if (!real_ns) return "unknown time";
    const time_t s = time_t(real_ns / 1000000000ull);
    tm t{};
    localtime_r(&s, &t);
    char buf[32];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t);
    const long off = t.tm_gmtoff / 60;  // minutes east of UTC
    const long a = off < 0 ? -off : off;
    return fmt::format("{}.{:03d}{}{:02d}:{:02d}", buf, int(real_ns / 1000000ull % 1000), off < 0 ? '-' : '+', a / 60,
                       a % 60);
}

const char* nccl_result_name(int32_t r, const char* unknown) {
    static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    return r >= 0 && r < 8 ? names[r] : unknown;
}

std::string echo(std::string_view value, size_t max_chars, EchoMode mode) {
    const bool line = mode == EchoMode::Line;
    std::string out;
    size_t used = 0;
    for (; used < value.size() && out.size() < max_chars; ++used) {
        const auto c = static_cast<unsigned char>(value[used]);
        if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else if (line && c == '\r')
            out += "\\r";
        else if (!line && c == '\\')
            out += "\\\\";
        else if (c < 0x20 || c == 0x7f || (!line && c > 0x7f))
            out += fmt::format("\\x{:02x}", c);
        else
            out.push_back(char(c));
    }
    if (used < value.size()) {
        if (line) {  // cut at a character's start: a UTF-8 sequence is not left half
            while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
            if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
        }
        out += fmt::format("... ({} bytes)", value.size());
    }
    return out;
}

std::string nccl_version_str(int32_t code) {
    if (code <= 0) return "unknown";
    // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
    if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
    return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

}  // namespace ncw::text

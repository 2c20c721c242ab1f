#include "read/text.h"

#include <fmt/format.h>

namespace ncw::text {

std::string hex(uint64_t v) { return fmt::format("0x{:016x}", v); }

std::string hexs(uint64_t v) { return fmt::format("0x{:x}", v); }

}  // namespace ncw::text

// Small text helpers every layer above the reader uses (the engine's evidence lines, the reports, the shim's dumps).
#pragma once

#include <cstdint>
#include <string>

namespace ncw::text {

std::string hex(uint64_t v);   // 0x%016x
std::string hexs(uint64_t v);  // 0x%x

}  // namespace ncw::text

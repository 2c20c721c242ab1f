// How the reader holds the fields of include/ncclwatch/format_fields.h: the TYPE column's names as C++ types, and
// the member declaration every reader struct (HeaderInfo, CommInfo, OpSig, Record) is generated with.
#pragma once

#include <cstdint>
#include <string>

#include "ncclwatch/format_fields.h"

namespace ncw::field {

using u8 = uint8_t;
using u16 = uint16_t;
using u32 = uint32_t;
using u64 = uint64_t;
using i32 = int32_t;
using i64 = int64_t;
using str = std::string;  // a fixed char field of the file, up to its first NUL

}  // namespace ncw::field

// X(TYPE, NAME, INIT, SHOW[, ENGINE]) -> a member with its initial value.
#define NCW_READER_MEMBER(type, name, init, ...) ::ncw::field::type name = init;

// The defaults of ncw::Config, read at compile time from the DEFAULT column of include/ncclwatch/config_table.h, so
// the table is the one place a default is written. A DEFAULT that does not parse as its KIND fails to compile.
#pragma once

#include <string_view>
#include <type_traits>

#include "ncclwatch/config_table.h"

namespace ncw::config_default {

enum class Kind { Bool, Int, Double, String, Enum };

// Whether `field` is in NCW_CONFIG_DERIVED: its DEFAULT is a description, and Config starts it empty or 0.
constexpr bool is_derived(std::string_view field) {
#define NCW_DERIVED_MATCH(name) || field == #name
    return false NCW_CONFIG_DERIVED(NCW_DERIVED_MATCH);
#undef NCW_DERIVED_MATCH
}

// A non-constant expression: reaching it in a constant evaluation is a compile error naming this function.
inline void default_does_not_parse() {}

constexpr bool parse_bool(std::string_view v) {
    if (v == "1") return true;
    if (v == "0") return false;
    return default_does_not_parse(), false;
}

// Decimal digits with an optional fraction ("60", "0.5"); enough for a default.
constexpr double parse_decimal(std::string_view v) {
    if (v.empty()) default_does_not_parse();
    double whole = 0, scale = 1;
    bool fraction = false;
    for (char c : v) {
        if (c == '.' && !fraction) {
            fraction = true;
        } else if (c >= '0' && c <= '9') {
            if (fraction) scale /= 10;
            whole = whole * 10 + (c - '0');
        } else {
            default_does_not_parse();
        }
    }
    return whole * scale;
}

// The position of `v` in "a|b|c".
constexpr int enum_index(std::string_view accepted, std::string_view v) {
    int i = 0;
    for (;;) {
        const size_t bar = accepted.find('|');
        if (accepted.substr(0, bar) == v) return i;
        if (bar == std::string_view::npos) return default_does_not_parse(), 0;
        accepted.remove_prefix(bar + 1);
        ++i;
    }
}

// The initial value of a Config member of type T, from its table row.
template <class T>
constexpr T value(std::string_view field, Kind kind, std::string_view def, std::string_view accepted) {
    if (is_derived(field)) return T{};
    if constexpr (std::is_same_v<T, bool>) {
        return parse_bool(def);
    } else if constexpr (std::is_arithmetic_v<T>) {
        return static_cast<T>(parse_decimal(def));
    } else if constexpr (std::is_enum_v<T>) {
        return static_cast<T>(enum_index(accepted, def));
    } else {
        // A string: the DEFAULT itself, checked to be one of ACCEPTED for an Enum.
        if (kind == Kind::Enum) (void)enum_index(accepted, def);
        return T(def);
    }
}

}  // namespace ncw::config_default

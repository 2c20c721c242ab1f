#include "read/plausible.h"

#include <string_view>
#include <type_traits>
#include <utility>

#include "ncclwatch/format_fields.h"

namespace ncw {
namespace {

constexpr bool is_count(std::string_view name) {
    // Durations (_ns) are times, which read/time_base judges; the other u64 numbers are counts and seqs.
    return name.size() < 3 || name.substr(name.size() - 3) != "_ns";
}

std::string too_many(std::string_view name, uint64_t v) {
    return std::string(name) + " " + std::to_string(v) + " is more than any process could have issued";
}

// One field of the list: a u64 count past the bound sets `why` (the first one found).
template <class T>
void check_count(std::string& why, std::string_view kind, std::string_view name, const T& v) {
    if constexpr (std::is_same_v<T, uint64_t>) {
        if (why.empty() && kind == "num" && is_count(name) && v > kMaxPlausibleCount) why = too_many(name, v);
    }
}

}  // namespace

std::string impossible_counter(const CommInfo& c) {
    // Every u64 count of the comm slot's list (format_fields.h), so that a field added there is checked too.
    std::string why;
#define NCW_CHECK_COUNT(type, name, init, kind, engine) check_count(why, #kind, #name, c.name);
    NCW_COMM_FIELDS(NCW_CHECK_COUNT)
#undef NCW_CHECK_COUNT
    if (!why.empty()) return why;
    for (const auto& [name, v] : {std::pair<const char*, uint64_t>{"coll_returned", c.coll_returned},
                                  {"coll_reached", c.coll_reached},
                                  {"coll_completed", c.coll_completed},
                                  {"first_failed_seq", c.first_failed_seq}})
        if (v > c.coll_issued && v - c.coll_issued > kMaxTornLead)
            return std::string(name) + " " + std::to_string(v) + " is past coll_issued " +
                   std::to_string(c.coll_issued) + " by more than any reading of a live slot could see";
    for (const auto& s : c.recent)
        if (s.seq > kMaxPlausibleCount) return too_many("a signature's seq", s.seq);
    for (const auto& g : c.gpu_spans)
        if (g.seq > kMaxPlausibleCount) return too_many("a GPU time's seq", g.seq);
    return "";
}

}  // namespace ncw

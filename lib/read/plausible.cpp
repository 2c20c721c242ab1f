#include "read/plausible.h"

#include <algorithm>
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

std::string too_many(std::string_view name, uint64_t v, uint64_t max) {
    return std::string(name) + " " + std::to_string(v) +
           (v <= kMaxPlausibleCount
                ? " is more than its process could have issued in its life so far (at most " + std::to_string(max) + ")"
                : " is more than any process could have issued");
}

// One field of the list: a u64 count past the bound sets `why` (the first one found).
template <class T>
void check_count(std::string& why, std::string_view kind, std::string_view name, const T& v, uint64_t max) {
    if constexpr (std::is_same_v<T, uint64_t>) {
        if (why.empty() && kind == "num" && is_count(name) && v > max) why = too_many(name, v, max);
    }
}

}  // namespace

uint64_t max_count_in_life(const HeaderInfo& h) noexcept {
    if (!h.start_mono_ns || h.heartbeat_mono_ns <= h.start_mono_ns) return kMaxPlausibleCount;
    const uint64_t life_ns = h.heartbeat_mono_ns - h.start_mono_ns;
    return life_ns >= kMaxPlausibleCount - kLifeSlack ? kMaxPlausibleCount : life_ns + kLifeSlack;
}

std::string impossible_counter(const CommInfo& c, uint64_t max_count) {
    max_count = std::min(max_count, kMaxPlausibleCount);
    // Every u64 count of the comm slot's list (format_fields.h), so that a field added there is checked too.
    std::string why;
#define NCW_CHECK_COUNT(type, name, init, kind, engine) check_count(why, #kind, #name, c.name, max_count);
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
        if (s.seq > max_count) return too_many("a signature's seq", s.seq, max_count);
    for (const auto& g : c.gpu_spans)
        if (g.seq > max_count) return too_many("a GPU time's seq", g.seq, max_count);
    return "";
}

}  // namespace ncw

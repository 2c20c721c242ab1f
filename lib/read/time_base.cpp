#include "read/time_base.h"

#include <string_view>

#include "ncclwatch/format_fields.h"

namespace ncw::time_base {

namespace {

// Only the fields whose SHOW is mono are instants on the writer's clock.
template <bool kMono, class T>
void rebase_field(T& v, int64_t d) {
    if constexpr (kMono) v = shift(v, d);
}
#define NCW_REBASE_FIELD(type, name, init, show, ...) rebase_field<std::string_view(#show) == "mono">(x.name, d);

}  // namespace

uint64_t clock_ns(clockid_t id) noexcept {
    timespec ts{};
    clock_gettime(id, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t shift(uint64_t t, int64_t d) noexcept {
    if (!t || !d) return t;  // 0 means "never": keep it
    if (d > 0) return t + uint64_t(d);
    const uint64_t back = uint64_t(-(d + 1)) + 1;
    return back >= t ? 1 : t - back;
}

namespace {

int64_t through_wall(const HeaderInfo& h, const Frame& f) noexcept {
    if (!h.start_real_ns || !f.real) return 0;
    return int64_t((h.start_real_ns - h.start_mono_ns) - (f.real - f.mono));  // unsigned wrap, then signed
}

}  // namespace

int64_t monotonic_shift(const HeaderInfo& h, const Frame& f) noexcept {
    if (h.boot_id_hash == 0 || h.boot_id_hash != f.boot) return 0;
    const int64_t d = through_wall(h, f);
    return d > kShiftedNs || d < -kShiftedNs ? d : 0;
}

int64_t offset_to(const HeaderInfo& h, const Frame& f) noexcept {
    if (h.boot_id_hash != 0 && h.boot_id_hash == f.boot) return monotonic_shift(h, f);
    return through_wall(h, f);
}

uint64_t to_real(const HeaderInfo& h, uint64_t mono) noexcept {
    if (!h.start_real_ns || mono < h.start_mono_ns) return 0;
    return mono - h.start_mono_ns + h.start_real_ns;
}

void rebase(CommInfo& c, int64_t d) noexcept {
    {
        auto& x = c;
        NCW_COMM_FIELDS(NCW_REBASE_FIELD)
    }
    try {
        for (auto& x : c.recent.mut()) {
            NCW_SIG_FIELDS(NCW_REBASE_FIELD)
        }
    } catch (...) {
        c.recent.clear();  // no memory for its own copy: better no signatures than ones on another clock
    }
}

}  // namespace ncw::time_base

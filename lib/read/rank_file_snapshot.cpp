// The rank-file reader's snapshots: plain copies out of the file (read/rank_file.h), generated from the lists of
// include/ncclwatch/format_fields.h, following the writer's seqlock and stamp protocols. A seqlock check needs its
// stamps read before and after the data, and one pread copies its bytes in no defined order: so the comm slots and
// the ring are read three times (stamps before, data, stamps after), each pass one syscall per contiguous run.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ncclwatch/config_table.h"
#include "ncclwatch/format.h"
#include "read/mapped_load.h"
#include "read/rank_file.h"
#include "read/redact.h"

namespace ncw {

using mapped::ld;
using mapped::lda;

bool known_op(uint8_t op) noexcept {
    const auto t = disk::OpType(op);
    return (t >= disk::OpType::AllReduce && t <= disk::OpType::Recv) ||
           (t >= disk::OpType::CommInit && t <= disk::OpType::WaitSignal);
}

namespace {

// A buffer of n bytes, 8-byte aligned (the file's structures are), left uninitialised: fetch fills what is used.
std::unique_ptr<uint64_t[]> scratch(size_t n) { return std::unique_ptr<uint64_t[]>(new uint64_t[(n + 7) / 8]); }

template <class T>
const T* at(const std::unique_ptr<uint64_t[]>& buf, uint64_t off) {
    return reinterpret_cast<const T*>(reinterpret_cast<const unsigned char*>(buf.get()) + off);
}

// A config table row's default (include/ncclwatch/config_table.h), as the variable spells it.
const char* config_default(std::string_view field) {
#define NCW_ROW_DEFAULT(row, name, kind, type, def, accepted, desc) \
    if (std::string_view(#row) == field) return def;
    NCW_CONFIG_TABLE(NCW_ROW_DEFAULT)
#undef NCW_ROW_DEFAULT
    return nullptr;
}

// A writer before format 1.7 left the values it ran with in its environment region: the "ncclwatch.<field>" fact
// (what the shim parsed), else its variable when that is a number, else the default it ran with; times `scale`, in
// ms. 0: a file without an environment region (1.0) says nothing.
uint32_t ms_from_env(const std::vector<std::string>& env, std::string_view field, const char* var, double scale) {
    if (env.empty()) return 0;
    const std::string fact_prefix = "ncclwatch." + std::string(field) + "=", var_prefix = std::string(var) + "=";
    std::string fact, value;
    for (const auto& e : env) {
        if (e.rfind(fact_prefix, 0) == 0) fact = e.substr(fact_prefix.size());
        if (e.rfind(var_prefix, 0) == 0) value = e.substr(var_prefix.size());
    }
    auto ms = [scale](const char* v) -> uint32_t {
        if (!v || !*v) return 0;
        char* end = nullptr;
        const double x = strtod(v, &end) * scale;
        return *end == '\0' && std::isfinite(x) && x >= 1 && x <= 4e9 ? uint32_t(std::lround(x)) : 0;
    };
    if (uint32_t t = ms(fact.c_str())) return t;
    if (uint32_t t = ms(value.c_str())) return t;
    return ms(config_default(field));
}

}  // namespace

std::vector<std::string> RankFile::env_entries(uint64_t published) const {
    std::vector<std::string> out;
    if (!open_ || env_capacity_ == 0 || env_offset_ >= size_) return out;
    const uint64_t n = std::min<uint64_t>({published, env_capacity_, size_ - env_offset_});
    // Bytes below env_bytes never change: one copy is consistent.
    std::string bytes(size_t(n), '\0');
    if (!fetch(env_offset_, bytes.data(), bytes.size())) return out;
    std::string cur;
    for (const char c : bytes) {
        if (c != '\0') {
            cur.push_back(c);
        } else if (!cur.empty()) {
            out.push_back(redact::env_entry(cur));  // a file of an older or foreign writer, too
            cur.clear();
        }
    }
    // An unterminated tail is an entry cut by a truncated file or a damaged count: dropped, not guessed at.
    return out;
}

HeaderInfo RankFile::header() const noexcept {
    HeaderInfo out;
    if (!open_) return out;
    try {
        alignas(8) unsigned char hbuf[sizeof(disk::FileHeader)];
        if (!fetch(0, hbuf, sizeof hbuf)) return out;  // validate() saw at least this much
        const auto* in = mapped::header_of(hbuf);
        NCW_HEADER_LAYOUT_FIELDS(NCW_LOAD_FIELD)
        out.actual_size = size_;
        NCW_HEADER_WRITER_FIELDS(NCW_LOAD_FIELD)
        NCW_HEADER_LIVE_FIELDS(NCW_LOAD_FIELD)
        NCW_HEADER_TAIL_FIELDS(NCW_LOAD_FIELD)
        if (out.minor >= 9) {
            NCW_HEADER_LAST_WORDS_FIELDS(NCW_LOAD_FIELD)
            if (!out.last_words_mono_ns) out.last_words.clear(), out.last_words_main = 0;  // not published yet
            out.last_words = redact::value(out.last_words);  // a file of an older or foreign writer, too
            NCW_HEADER_TEARDOWN_FIELDS(NCW_LOAD_FIELD)
            if (!out.teardown_since_ns) out.teardown_comm_id = 0, out.teardown_op = 0;
        }
        if (out.minor >= 12) {
            NCW_HEADER_END_CAUSE_FIELDS(NCW_LOAD_FIELD)
            if (!out.abort_mono_ns) out.abort_comm_id = 0, out.abort_thread.clear();  // not published yet
            if (!out.end_kind) out.end_thread.clear();
        }
        if (out.minor >= 13) {
            NCW_HEADER_ABSORBED_FIELDS(NCW_LOAD_FIELD)
            if (!out.absorbed_mono_ns) out.absorbed_signal = 0;  // not published yet
        }
        if (out.minor >= 15) NCW_HEADER_NOTES_FIELDS(NCW_LOAD_FIELD)
        out.env = env_entries(ld(in->env_bytes));
        if (!out.timeout_ms) out.timeout_ms = ms_from_env(out.env, "timeout_sec", "NCCLWATCH_TIMEOUT_SEC", 1000);
        if (!out.poll_ms) out.poll_ms = ms_from_env(out.env, "poll_ms", "NCCLWATCH_POLL_MS", 1);
        load_py_stacks(out);
    } catch (...) {
    }
    return out;
}

// The seqlock of a Python stacks capture: its fields [from, to) of the header and its text, between two equal even
// reads of its seq. A writer that keeps rewriting (it never does for long) leaves the fields and no text after a few
// tries. `decode` copies the fields out of the header bytes and returns (seq, len, status); the text is parsed where
// it holds stacks.
template <class Decode>
void RankFile::load_capture(size_t from, size_t to, size_t seq_at, uint64_t offset, uint32_t capacity, Decode decode,
                            std::string& text_out, std::shared_ptr<const py::Stacks>& stacks_out) const {
    if (!open_ || capacity == 0) return;
    alignas(8) unsigned char hbuf[sizeof(disk::FileHeader)] = {};
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (!fetch(from, hbuf + from, to - from)) return;
        const auto [seq, stored_len, status] = decode(mapped::header_of(hbuf));
        if (seq % 2) continue;  // being written
        const uint32_t len = std::min(stored_len, capacity);
        std::string text(len, '\0');
        if (len && (offset >= size_ || !fetch(offset, text.data(), len))) return;
        uint64_t after = 0;
        if (!fetch(seq_at, &after, sizeof after)) return;
        if (after != seq) continue;
        if (status == uint32_t(disk::PyStacksStatus::Captured))
            stacks_out = std::make_shared<const py::Stacks>(py::parse(text));
        text_out = std::move(text);
        return;
    }
}

void RankFile::load_py_stacks(HeaderInfo& out) const {
    load_capture(
        offsetof(disk::FileHeader, py_stacks_offset), offsetof(disk::FileHeader, py_stacks_status) + sizeof(uint32_t),
        offsetof(disk::FileHeader, py_stacks_seq), py_stacks_offset_, py_stacks_capacity_,
        [&](const disk::FileHeader* in) {
            NCW_HEADER_PY_STACKS_FIELDS(NCW_LOAD_FIELD)
            out.py_stacks_offset = py_stacks_offset_;
            out.py_stacks_capacity = py_stacks_capacity_;
            return std::tuple(out.py_stacks_seq, out.py_stacks_len, out.py_stacks_status);
        },
        out.py_stacks_text, out.py_stacks);
    load_capture(
        offsetof(disk::FileHeader, py_held_offset), offsetof(disk::FileHeader, py_held_status) + sizeof(uint32_t),
        offsetof(disk::FileHeader, py_held_seq), py_held_offset_, py_held_capacity_,
        [&](const disk::FileHeader* in) {
            NCW_HEADER_PY_HELD_FIELDS(NCW_LOAD_FIELD)
            out.py_held_offset = py_held_offset_;
            out.py_held_capacity = py_held_capacity_;
            return std::tuple(out.py_held_seq, out.py_held_len, out.py_held_status);
        },
        out.py_held_text, out.py_held);
}

namespace {

// The seqlock of one CommSlot::recent entry: the same nonzero seq before (`before`, from an earlier copy) and after
// (`after`, from a later one) the copy = a consistent entry. An entry outside its seq % kRecentSigs place is damage.
bool load_sig(const disk::OpSignature& e, uint64_t before, uint64_t after, uint32_t place, SigInfo& out) noexcept {
    const uint64_t seq = ld(e.seq);
    if (seq == 0 || seq != before || seq % disk::kRecentSigs != place) return false;
    const auto* in = &e;
    NCW_SIG_FIELDS(NCW_LOAD_FIELD)
    out.seq = seq;
    return after == seq;
}

const disk::CommSlot* slot_at(const std::unique_ptr<uint64_t[]>& buf, uint32_t i, uint32_t slot_size) {
    return at<disk::CommSlot>(buf, uint64_t(i) * slot_size);
}

// One slot out of three copies: `first` (the generation and the signatures' seqs before), `in` (the data) and `later`
// (the same after). false: the slot was being reused for a later communicator (1.3: an odd generation, or one that
// changed between the copies), left out rather than read as a mix of two communicators.
bool load_slot(const disk::CommSlot* first, const disk::CommSlot* in, const disk::CommSlot* later, CommInfo& out) {
    const uint64_t g1 = ld(first->generation);
    if ((g1 & 1) || ld(in->generation) != g1 || ld(later->generation) != g1) return false;
    NCW_COMM_FIELDS(NCW_LOAD_FIELD)
    std::vector<SigInfo> recent;
    recent.reserve(disk::kRecentSigs);
    for (uint32_t j = 0; j < disk::kRecentSigs; ++j) {
        SigInfo g;
        if (load_sig(in->recent[j], ld(first->recent[j].seq), ld(later->recent[j].seq), j, g)) recent.push_back(g);
    }
    std::sort(recent.begin(), recent.end(), [](const SigInfo& a, const SigInfo& b) { return a.seq < b.seq; });
    out.recent = std::move(recent);
    return true;
}

}  // namespace

std::vector<CommInfo> RankFile::comms() const noexcept {
    std::vector<CommInfo> out_all;
    if (!open_) return out_all;
    try {
        // num_comms is published (release) after a slot's identity is written: read it before the slots.
        uint32_t num = 0;
        if (!fetch(offsetof(disk::FileHeader, num_comms), &num, sizeof num)) return out_all;
        const uint32_t n = std::min({num, max_comms_, usable_comms_});
        if (n == 0) return out_all;
        const size_t bytes = size_t(n) * comm_slot_size_;
        // Pass 1: the generations and the signatures' seqs before the copy (a buffer of their own).
        auto first = scratch(bytes);
        if (!fetch(comm_table_offset_, first.get(), bytes)) return out_all;
        // Pass 2: the data. Pass 3: the seqs after, into a third buffer.
        auto buf = scratch(bytes);
        if (!fetch(comm_table_offset_, buf.get(), bytes)) return out_all;
        auto after_buf = scratch(bytes);
        if (!fetch(comm_table_offset_, after_buf.get(), bytes)) return out_all;
        // A slot shorter than ours (before 1.5): each copied into a zeroed slot of our size, so that the fields it
        // lacks read as zero ("not recorded") instead of as the next slot's bytes.
        uint32_t stride = comm_slot_size_;
        if (stride < sizeof(disk::CommSlot)) {
            const auto widen = [&](std::unique_ptr<uint64_t[]>& b) {
                auto wide = scratch(size_t(n) * sizeof(disk::CommSlot));
                auto* out = reinterpret_cast<unsigned char*>(wide.get());
                const auto* from = reinterpret_cast<const unsigned char*>(b.get());
                memset(out, 0, size_t(n) * sizeof(disk::CommSlot));
                for (uint32_t i = 0; i < n; ++i)
                    memcpy(out + size_t(i) * sizeof(disk::CommSlot), from + size_t(i) * stride, stride);
                b = std::move(wide);
            };
            widen(first);
            widen(buf);
            widen(after_buf);
            stride = sizeof(disk::CommSlot);
        }
        out_all.reserve(n);
        for (uint32_t i = 0; i < n; ++i) {
            CommInfo out;
            out.slot = i;
            if (load_slot(slot_at(first, i, stride), slot_at(buf, i, stride), slot_at(after_buf, i, stride), out))
                out_all.push_back(std::move(out));
        }
    } catch (...) {
    }
    return out_all;
}

std::vector<CommInfo> read_memory_slots(const std::vector<const disk::CommSlot*>& slots) noexcept {
    std::vector<CommInfo> out_all;
    try {
        out_all.reserve(slots.size());
        // The same three copies as the file's table, each with atomic loads (the hot path writes these slots).
        auto first = std::make_unique<disk::CommSlot>();
        auto in = std::make_unique<disk::CommSlot>();
        auto later = std::make_unique<disk::CommSlot>();
        for (const disk::CommSlot* s : slots) {
            if (!s) continue;
            mapped::copy_live(first.get(), s, sizeof(disk::CommSlot));
            mapped::copy_live(in.get(), s, sizeof(disk::CommSlot));
            mapped::copy_live(later.get(), s, sizeof(disk::CommSlot));
            CommInfo out;
            out.slot = kNoCommSlot;
            if (load_slot(first.get(), in.get(), later.get(), out)) out_all.push_back(std::move(out));
        }
    } catch (...) {
    }
    return out_all;
}

bool RankFile::slot_in_file(uint64_t ticket) const noexcept {
    const uint64_t off = ring_offset_ + (ticket & (uint64_t(ring_capacity_) - 1)) * record_size_;
    return off + sizeof(disk::OpRecord) <= size_;
}

bool RankFile::fetch_ring(uint64_t start, uint64_t count, unsigned char* buf) const noexcept {
    const uint64_t cap = ring_capacity_;
    // Slots [0, lim) lie in the file (a truncated file cuts the ring's tail).
    const uint64_t first_end = ring_offset_ + sizeof(disk::OpRecord);
    const uint64_t lim = size_ >= first_end ? std::min<uint64_t>(cap, (size_ - first_end) / record_size_ + 1) : 0;
    for (uint64_t t = start; t < start + count;) {
        const uint64_t idx = t & (cap - 1);
        const uint64_t run = std::min(start + count - t, cap - idx);  // contiguous up to the ring's end
        const uint64_t inside = idx < lim ? std::min(run, lim - idx) : 0;
        if (inside && !fetch(ring_offset_ + idx * record_size_, buf + (t - start) * record_size_,
                             size_t((inside - 1) * record_size_ + sizeof(disk::OpRecord))))
            return false;
        t += run;
    }
    return true;
}

uint64_t RankFile::write_ticket() const noexcept {
    uint64_t wt = 0;
    if (!open_ || !fetch(offsetof(disk::FileHeader, write_ticket), &wt, sizeof wt)) return 0;
    return wt;
}

RecordSet RankFile::records(uint64_t since_ticket) const noexcept {
    RecordSet set;
    if (!open_) return set;
    try {
        uint64_t wt = 0;
        if (!fetch(offsetof(disk::FileHeader, write_ticket), &wt, sizeof wt)) return set;
        const uint64_t cap = ring_capacity_;
        set.write_ticket = wt;
        set.first_ticket = wt > cap ? wt - cap : 0;
        set.dropped = set.first_ticket;
        const uint64_t start = std::max(set.first_ticket, since_ticket);
        if (start >= wt) return set;
        const uint64_t count = wt - start;  // at most cap
        set.records.reserve(size_t(std::min<uint64_t>(count, 65536)));
        auto buf = scratch(size_t(count * record_size_));
        auto* bytes = reinterpret_cast<unsigned char*>(buf.get());
        auto rec = [&](uint64_t t) { return at<disk::OpRecord>(buf, (t - start) * record_size_); };
        // Pass 1: the stamps before.
        if (!fetch_ring(start, count, bytes)) return RecordSet{};
        std::vector<uint64_t> s1(static_cast<size_t>(count));
        for (uint64_t t = start; t < wt; ++t) s1[t - start] = slot_in_file(t) ? ld(rec(t)->stamp) : 0;
        // Pass 2: the data.
        if (!fetch_ring(start, count, bytes)) return RecordSet{};
        std::vector<uint64_t> kept;  // tickets of set.records, for the check after
        for (uint64_t t = start; t < wt; ++t) {
            if (!slot_in_file(t)) {
                ++set.cut;
                continue;
            }
            const auto* in = rec(t);
            const uint64_t want = 2 * t + 2;
            const uint64_t stamp = s1[t - start];
            if (stamp != want) {
                // A later stamp: the slot already holds a newer lap's record. An earlier even one (an older lap's
                // record, or none): the ticket is not written yet. An odd one: being written, or damaged.
                ++(stamp > want ? set.dropped : stamp % 2 == 0 ? set.unwritten : set.torn);
                continue;
            }
            Record out;
            out.ticket = t;
            NCW_RECORD_FIELDS(NCW_LOAD_FIELD)
            out.comm_nranks = ld(in->comm_nranks);
            out.comm_rank = out.comm_nranks ? ld(in->comm_rank) : -1;
            if (!known_op(out.op)) {
                ++set.unknown_op;
                continue;
            }
            set.records.push_back(out);
        }
        // Pass 3: the stamps after; a record whose slot moved on meanwhile is dropped (or torn), as before.
        if (!fetch_ring(start, count, bytes)) return RecordSet{};
        size_t keep = 0;
        for (size_t i = 0; i < set.records.size(); ++i) {
            const uint64_t t = set.records[i].ticket;
            const uint64_t s2 = ld(rec(t)->stamp);
            if (s2 != 2 * t + 2) {
                ++(s2 > 2 * t + 2 ? set.dropped : set.torn);
                continue;
            }
            set.records[keep++] = set.records[i];
        }
        set.records.resize(keep);
    } catch (...) {
    }
    return set;
}

std::vector<uint64_t> RankFile::backtrace(uint64_t ticket) const noexcept {
    std::vector<uint64_t> frames;
    if (!open_ || bt_depth_ == 0) return frames;
    try {
        const uint64_t idx = ticket & (uint64_t(ring_capacity_) - 1);
        const uint64_t rec_off = ring_offset_ + idx * record_size_;
        const uint64_t bt_off = bt_offset_ + idx * bt_depth_ * sizeof(uint64_t);
        if (rec_off + sizeof(disk::OpRecord) > size_ || bt_off + uint64_t(bt_depth_) * sizeof(uint64_t) > size_)
            return frames;
        // The frames are issue-time data: written before the stamp becomes 2*ticket+2, so the stamp guards them too.
        constexpr uint64_t kStamp = offsetof(disk::OpRecord, stamp);
        uint64_t s1 = 0, s2 = 0;
        if (!fetch(rec_off + kStamp, &s1, sizeof s1) || s1 != 2 * ticket + 2) return frames;
        frames.resize(bt_depth_);
        if (!fetch(bt_off, frames.data(), frames.size() * sizeof(uint64_t))) return {};
        if (!fetch(rec_off + kStamp, &s2, sizeof s2) || s2 != s1) return {};
        while (!frames.empty() && frames.back() == 0) frames.pop_back();
    } catch (...) {
        frames.clear();
    }
    return frames;
}

}  // namespace ncw

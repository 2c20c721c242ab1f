// The rank-file reader's snapshots: plain copies out of the mapping (read/rank_file.h), generated from the lists of
// include/ncclwatch/format_fields.h, following the writer's seqlock and stamp protocols.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "read/mapped_load.h"
#include "read/rank_file.h"

namespace ncw {

using mapped::ld;
using mapped::lda;

bool known_op(uint8_t op) noexcept {
    const auto t = disk::OpType(op);
    return (t >= disk::OpType::AllReduce && t <= disk::OpType::Recv) ||
           (t >= disk::OpType::CommInit && t <= disk::OpType::AsyncError);
}

std::vector<std::string> RankFile::env_entries() const {
    std::vector<std::string> out;
    if (!base_ || env_capacity_ == 0 || env_offset_ >= size_) return out;
    const uint64_t published = ld(mapped::header_of(base_)->env_bytes, std::memory_order_acquire);
    const uint64_t n = std::min<uint64_t>({published, env_capacity_, size_ - env_offset_});
    const char* p = reinterpret_cast<const char*>(base_ + env_offset_);
    std::string cur;
    for (uint64_t i = 0; i < n; ++i) {
        const char c = __atomic_load_n(&p[i], __ATOMIC_RELAXED);
        if (c != '\0') {
            cur.push_back(c);
        } else if (!cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
        }
    }
    // An unterminated tail is an entry cut by a truncated file or a damaged count: dropped, not guessed at.
    return out;
}

HeaderInfo RankFile::header() const noexcept {
    HeaderInfo out;
    if (!base_) return out;
    try {
        const auto* in = mapped::header_of(base_);
        NCW_HEADER_LAYOUT_FIELDS(NCW_LOAD_FIELD)
        out.actual_size = size_;
        NCW_HEADER_WRITER_FIELDS(NCW_LOAD_FIELD)
        NCW_HEADER_LIVE_FIELDS(NCW_LOAD_FIELD)
        out.env = env_entries();
    } catch (...) {
    }
    return out;
}

namespace {

// The seqlock of one CommSlot::recent entry: the same nonzero seq before and after the copy = a consistent entry.
// An entry outside its seq % kRecentSigs place is damage, not data.
bool load_sig(const disk::OpSignature& e, uint32_t place, SigInfo& out) noexcept {
    const uint64_t seq = ld(e.seq, std::memory_order_acquire);
    if (seq == 0 || seq % disk::kRecentSigs != place) return false;
    const auto* in = &e;
    NCW_SIG_FIELDS(NCW_LOAD_FIELD)
    out.seq = seq;
    return ld(e.seq) == seq;
}

}  // namespace

std::vector<CommInfo> RankFile::comms() const noexcept {
    std::vector<CommInfo> out_all;
    if (!base_) return out_all;
    try {
        // num_comms is published (release) after a slot's identity is written, so acquire it first.
        const uint32_t n =
            std::min({ld(mapped::header_of(base_)->num_comms, std::memory_order_acquire), max_comms_, usable_comms_});
        out_all.reserve(n);
        for (uint32_t i = 0; i < n; ++i) {
            const auto* in =
                reinterpret_cast<const disk::CommSlot*>(base_ + comm_table_offset_ + uint64_t(i) * comm_slot_size_);
            CommInfo out;
            // 1.3: a slot being reused for a later communicator is odd, or changes generation during the copy; a
            // few tries, then the slot is left out of this snapshot rather than read as a mix of two.
            bool whole = false;
            for (int attempt = 0; attempt < 4 && !whole; ++attempt) {
                const uint64_t g1 = ld(in->generation, std::memory_order_acquire);
                if (g1 & 1) continue;
                out = CommInfo{};
                out.slot = i;
                NCW_COMM_FIELDS(NCW_LOAD_FIELD)
                out.recent.reserve(disk::kRecentSigs);
                for (uint32_t j = 0; j < disk::kRecentSigs; ++j) {
                    SigInfo g;
                    if (load_sig(in->recent[j], j, g)) out.recent.push_back(g);
                }
                std::atomic_thread_fence(std::memory_order_acquire);
                whole = ld(in->generation, std::memory_order_relaxed) == g1;
            }
            if (!whole) continue;
            std::sort(out.recent.begin(), out.recent.end(),
                      [](const SigInfo& a, const SigInfo& b) { return a.seq < b.seq; });
            out_all.push_back(std::move(out));
        }
    } catch (...) {
    }
    return out_all;
}

RecordSet RankFile::records(uint64_t since_ticket) const noexcept {
    RecordSet set;
    if (!base_) return set;
    try {
        const uint64_t wt = ld(mapped::header_of(base_)->write_ticket, std::memory_order_acquire);
        const uint64_t cap = ring_capacity_;
        set.write_ticket = wt;
        set.first_ticket = wt > cap ? wt - cap : 0;
        set.dropped = set.first_ticket;
        const uint64_t start = std::max(set.first_ticket, since_ticket);
        if (start < wt) set.records.reserve(size_t(std::min<uint64_t>(wt - start, 65536)));
        for (uint64_t t = start; t < wt; ++t) {
            const uint64_t off = ring_offset_ + (t & (cap - 1)) * record_size_;
            if (off + sizeof(disk::OpRecord) > size_) {
                ++set.cut;
                continue;
            }
            const auto* in = reinterpret_cast<const disk::OpRecord*>(base_ + off);
            const uint64_t want = 2 * t + 2;
            const uint64_t s1 = ld(in->stamp, std::memory_order_acquire);
            if (s1 != want) {
                // A later stamp: the slot already holds a newer lap's record. Anything else: not written yet,
                // being written, or damaged.
                ++(s1 > want ? set.dropped : set.torn);
                continue;
            }
            Record out;
            out.ticket = t;
            NCW_RECORD_FIELDS(NCW_LOAD_FIELD)
            out.comm_nranks = ld(in->comm_nranks);
            out.comm_rank = out.comm_nranks ? ld(in->comm_rank) : -1;
            const uint64_t s2 = ld(in->stamp);
            if (s2 != s1) {
                ++(s2 > want ? set.dropped : set.torn);
                continue;
            }
            if (!known_op(out.op)) {
                ++set.unknown_op;
                continue;
            }
            set.records.push_back(out);
        }
    } catch (...) {
    }
    return set;
}

std::vector<uint64_t> RankFile::backtrace(uint64_t ticket) const noexcept {
    std::vector<uint64_t> frames;
    if (!base_ || bt_depth_ == 0) return frames;
    try {
        const uint64_t idx = ticket & (uint64_t(ring_capacity_) - 1);
        const uint64_t rec_off = ring_offset_ + idx * record_size_;
        const uint64_t bt_off = bt_offset_ + idx * bt_depth_ * sizeof(uint64_t);
        if (rec_off + sizeof(disk::OpRecord) > size_ || bt_off + uint64_t(bt_depth_) * sizeof(uint64_t) > size_)
            return frames;
        const auto* r = reinterpret_cast<const disk::OpRecord*>(base_ + rec_off);
        const auto* f = reinterpret_cast<const uint64_t*>(base_ + bt_off);
        // The frames are issue-time data: written before the stamp becomes 2*ticket+2, so the stamp guards them too.
        const uint64_t s1 = ld(r->stamp, std::memory_order_acquire);
        if (s1 != 2 * ticket + 2) return frames;
        frames.resize(bt_depth_);
        for (uint32_t i = 0; i < bt_depth_; ++i) frames[i] = lda(f[i]);
        if (ld(r->stamp) != s1) return {};
        while (!frames.empty() && frames.back() == 0) frames.pop_back();
    } catch (...) {
        frames.clear();
    }
    return frames;
}

}  // namespace ncw

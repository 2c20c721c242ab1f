// The rank-file reader. Every read of the mapping is an atomic load (relaxed unless the protocol needs acquire): the
// writer is another process (or thread) updating the same pages, and atomic loads keep the copy free of data races.
#include "read/rank_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "ncclwatch/format.h"

namespace ncw {

namespace {

namespace fs = std::filesystem;

static_assert(sizeof(disk::CommSlot) % 8 == 0, "comm slots must keep 8-byte alignment");

// Bounds on header sizes. Generous enough for newer minors, tight enough that a corrupt header cannot make a reader
// step wildly (all products of them fit easily in 64 bits).
constexpr uint32_t kMaxHeaderSize = 1u << 20;
constexpr uint32_t kMaxCommSlotSize = 1u << 20;
constexpr uint32_t kMaxRecordSize = 1u << 16;
constexpr uint32_t kMaxCommsLimit = 4096;
constexpr uint64_t kMaxOffset = 1ull << 48;
constexpr uint32_t kMaxEnvCapacity = 1u << 20;

template <class T>
T ld(const T& field) noexcept {
    return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

// Loads inside a seqlock/stamp window are acquire: they keep the closing re-read of the stamp after them without a
// standalone fence (which ThreadSanitizer does not model), and cost nothing extra on x86.
template <class T>
T lda(const T& field) noexcept {
    return __atomic_load_n(&field, __ATOMIC_ACQUIRE);
}

template <class T>
T ld(const std::atomic<T>& field, std::memory_order mo = std::memory_order_relaxed) noexcept {
    return field.load(mo);
}

// A fixed-size char field, up to its first NUL. Byte-wise atomic loads: the field may be written while we read it.
template <size_t N>
std::string ld_str(const char (&field)[N]) {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
        const char c = __atomic_load_n(&field[i], __ATOMIC_RELAXED);
        if (c == '\0') break;
        out.push_back(c);
    }
    return out;
}

std::string errno_str(int e) { return std::error_code(e, std::generic_category()).message(); }

std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

const disk::FileHeader* header_of(const unsigned char* base) { return reinterpret_cast<const disk::FileHeader*>(base); }

}  // namespace

uint64_t this_boot_id_hash() noexcept {
    static const uint64_t cached = [] {
        char buf[128];
        const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return uint64_t(0);
        const ssize_t n = ::read(fd, buf, sizeof buf);
        ::close(fd);
        if (n <= 0) return uint64_t(0);
        size_t b = 0, e = size_t(n);
        while (b < e && (buf[b] == ' ' || buf[b] == '\n' || buf[b] == '\t' || buf[b] == '\r')) ++b;
        while (e > b && (buf[e - 1] == ' ' || buf[e - 1] == '\n' || buf[e - 1] == '\t' || buf[e - 1] == '\r')) --e;
        return e > b ? fnv1a64(buf + b, e - b) : uint64_t(0);
    }();
    return cached;
}

std::string this_hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return {};
    return buf;
}

bool known_op(uint8_t op) noexcept {
    const auto t = disk::OpType(op);
    return (t >= disk::OpType::AllReduce && t <= disk::OpType::Recv) ||
           (t >= disk::OpType::CommInit && t <= disk::OpType::AsyncError);
}

// ---- RankFile ----

RankFile::~RankFile() { close(); }

RankFile::RankFile(RankFile&& o) noexcept { *this = std::move(o); }

RankFile& RankFile::operator=(RankFile&& o) noexcept {
    if (this == &o) return *this;
    close();
    path_ = std::move(o.path_);
    error_ = std::move(o.error_);
    warnings_ = std::move(o.warnings_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owned_ = std::exchange(o.owned_, false);
    truncated_ = o.truncated_;
    comm_table_offset_ = o.comm_table_offset_;
    ring_offset_ = o.ring_offset_;
    bt_offset_ = o.bt_offset_;
    comm_slot_size_ = o.comm_slot_size_;
    record_size_ = o.record_size_;
    max_comms_ = o.max_comms_;
    ring_capacity_ = o.ring_capacity_;
    bt_depth_ = o.bt_depth_;
    usable_comms_ = o.usable_comms_;
    return *this;
}

void RankFile::close() noexcept {
    if (base_ && owned_) munmap(const_cast<unsigned char*>(base_), size_);
    base_ = nullptr;
    owned_ = false;
    size_ = 0;
    truncated_ = false;
    usable_comms_ = 0;
}

bool RankFile::fail(std::string msg) noexcept {
    error_ = std::move(msg);
    close();
    return false;
}

bool RankFile::open(const std::string& path) noexcept {
    close();
    error_.clear();
    warnings_.clear();
    try {
        path_ = path;
        // O_NONBLOCK: opening a FIFO that happens to be named *.ncw must not hang the watchdog.
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) return fail("cannot open: " + errno_str(errno));
        struct stat st {};
        if (fstat(fd, &st) != 0) {
            const int e = errno;
            ::close(fd);
            return fail("cannot stat: " + errno_str(e));
        }
        if (!S_ISREG(st.st_mode)) {
            ::close(fd);
            return fail("not a regular file");
        }
        if (st.st_size <= 0) {
            ::close(fd);
            return fail("empty file (0 bytes): not a rank file, or not written yet");
        }
        // The writer sizes the file once and never shrinks it; a file truncated under us would raise SIGBUS, which
        // a reader cannot guard against short of copying the file.
        void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        const int e = errno;
        ::close(fd);
        if (p == MAP_FAILED) return fail("cannot map: " + errno_str(e));
        base_ = static_cast<const unsigned char*>(p);
        size_ = size_t(st.st_size);
        owned_ = true;
        return validate();
    } catch (const std::exception& ex) {
        return fail(std::string("cannot read: ") + ex.what());
    } catch (...) {
        return fail("cannot read: unknown error");
    }
}

bool RankFile::open_memory(const void* base, size_t size, const std::string& label) noexcept {
    close();
    error_.clear();
    warnings_.clear();
    try {
        path_ = label;
        if (!base || size == 0) return fail("no mapping");
        base_ = static_cast<const unsigned char*>(base);
        size_ = size;
        owned_ = false;
        return validate();
    } catch (...) {
        return fail("cannot read: out of memory");
    }
}

bool RankFile::validate() noexcept {
    const auto* h = header_of(base_);
    if (size_ < offsetof(disk::FileHeader, header_size))
        return fail(strf("too small to be a rank file: %zu bytes", size_));
    char magic[8];
    // The writer fills the header and stores the magic last, after a release fence: acquire loads here make the
    // rest of the header visible once the magic is.
    for (size_t i = 0; i < 8; ++i) magic[i] = lda(h->magic[i]);
    if (memcmp(magic, disk::kMagic, sizeof magic) != 0) return fail("not an ncclwatch rank file (bad magic)");
    const uint16_t major = ld(h->major), minor = ld(h->minor);
    if (major > disk::kFormatMajor)
        return fail(strf("written by a newer ncclwatch (format %u.x); this reader understands %u.x", unsigned(major),
                         unsigned(disk::kFormatMajor)));
    if (major < 1) return fail(strf("unsupported format %u.%u", unsigned(major), unsigned(minor)));
    if (size_ < sizeof(disk::FileHeader)) {
        const uint64_t want =
            size_ >= offsetof(disk::FileHeader, file_size) + sizeof(uint64_t) ? ld(h->file_size) : disk::kHeaderBytes;
        return fail(strf("truncated: %zu bytes of %llu (the header itself is cut)", size_, (unsigned long long)want));
    }

    const uint32_t header_size = ld(h->header_size);
    const uint32_t slot = ld(h->comm_slot_size);
    const uint32_t rec = ld(h->record_size);
    const uint32_t max_comms = ld(h->max_comms);
    const uint32_t cap = ld(h->ring_capacity);
    const uint32_t depth = ld(h->bt_depth);
    const uint64_t comm_off = ld(h->comm_table_offset);
    const uint64_t ring_off = ld(h->ring_offset);
    const uint64_t bt_off = ld(h->bt_offset);
    const uint64_t file_size = ld(h->file_size);

    if (header_size < sizeof(disk::FileHeader) || header_size > kMaxHeaderSize)
        return fail(strf("corrupt header: header_size %u", header_size));
    if (slot < sizeof(disk::CommSlot) || slot > kMaxCommSlotSize || slot % 8)
        return fail(
            strf("corrupt header: comm_slot_size %u (need a multiple of 8, >= %zu)", slot, sizeof(disk::CommSlot)));
    if (rec < sizeof(disk::OpRecord) || rec > kMaxRecordSize || rec % 8)
        return fail(strf("corrupt header: record_size %u (need a multiple of 8, >= %zu)", rec, sizeof(disk::OpRecord)));
    if (!disk::is_pow2(cap) || cap < disk::kMinRingCapacity || cap > disk::kMaxRingCapacity)
        return fail(strf("corrupt header: ring_capacity %u (need a power of two in %u..%u)", cap,
                         disk::kMinRingCapacity, disk::kMaxRingCapacity));
    if (max_comms > kMaxCommsLimit)
        return fail(strf("corrupt header: max_comms %u (at most %u)", max_comms, kMaxCommsLimit));
    if (depth > disk::kMaxBacktraceDepth)
        return fail(strf("corrupt header: bt_depth %u (at most %u)", depth, disk::kMaxBacktraceDepth));
    if (comm_off > kMaxOffset || ring_off > kMaxOffset || bt_off > kMaxOffset || file_size > kMaxOffset ||
        comm_off % 8 || ring_off % 8 || bt_off % 8)
        return fail("corrupt header: region offsets out of range or misaligned");

    // Regions in order, without overlap; the products below cannot overflow given the bounds above.
    const uint64_t comm_end = comm_off + uint64_t(max_comms) * slot;
    const uint64_t ring_end = ring_off + uint64_t(cap) * rec;
    const uint64_t bt_end = depth ? bt_off + uint64_t(cap) * depth * sizeof(uint64_t) : ring_end;
    if (comm_off < header_size) return fail("corrupt header: comm table overlaps the header");
    if (ring_off < comm_end) return fail("corrupt header: ring overlaps the comm table");
    if (depth && bt_off < ring_end) return fail("corrupt header: backtrace region overlaps the ring");
    if (file_size < std::max(ring_end, bt_end))
        return fail(strf("corrupt header: regions end at %llu, past the declared file size %llu",
                         (unsigned long long)std::max(ring_end, bt_end), (unsigned long long)file_size));

    comm_table_offset_ = comm_off;
    ring_offset_ = ring_off;
    bt_offset_ = bt_off;
    comm_slot_size_ = slot;
    record_size_ = rec;
    max_comms_ = max_comms;
    ring_capacity_ = cap;
    bt_depth_ = depth;
    usable_comms_ = size_ > comm_off ? uint32_t(std::min<uint64_t>(max_comms, (size_ - comm_off) / slot)) : 0;
    validate_env_region(minor, std::max(ring_end, bt_end), file_size);

    if (size_ < file_size) {
        truncated_ = true;
        std::string what;
        try {
            if (usable_comms_ < max_comms)
                what = strf("comm table cut after %u of %u slots, ring lost", usable_comms_, max_comms);
            else if (size_ < ring_end) {
                const uint64_t whole = size_ > ring_off ? (size_ - ring_off) / rec : 0;
                what = strf("ring cut after %llu of %u records", (unsigned long long)whole, cap);
            } else if (size_ < bt_end) {
                what = "backtrace region cut";
            } else {
                what = "environment region cut";
            }
            warnings_.push_back(
                strf("truncated: %zu bytes of %llu (%s)", size_, (unsigned long long)file_size, what.c_str()));
        } catch (...) {
        }
    }
    return true;
}

// The environment region is optional evidence: a damaged one is ignored with a warning, never a reason to reject
// the file. A 1.0 file (or a 1.1 writer that had no room) leaves the fields zero.
void RankFile::validate_env_region(uint16_t minor, uint64_t regions_end, uint64_t file_size) noexcept {
    env_offset_ = 0;
    env_capacity_ = 0;
    if (minor < 1) return;
    const auto* h = header_of(base_);
    const uint64_t off = ld(h->env_offset);
    const uint32_t cap = ld(h->env_capacity);
    if (off == 0 && cap == 0) return;
    if (cap > kMaxEnvCapacity || off < regions_end || off > kMaxOffset || off + cap > file_size) {
        try {
            warnings_.push_back(
                strf("environment region ignored: offset %llu, %u bytes (regions end at %llu, file "
                     "size %llu)",
                     (unsigned long long)off, cap, (unsigned long long)regions_end, (unsigned long long)file_size));
        } catch (...) {
        }
        return;
    }
    env_offset_ = off;
    env_capacity_ = cap;
}

std::vector<std::string> RankFile::env_entries() const {
    std::vector<std::string> out;
    if (!base_ || env_capacity_ == 0 || env_offset_ >= size_) return out;
    const uint64_t published = ld(header_of(base_)->env_bytes, std::memory_order_acquire);
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
        const auto* h = header_of(base_);
        out.major = ld(h->major);
        out.minor = ld(h->minor);
        out.header_size = ld(h->header_size);
        out.comm_slot_size = ld(h->comm_slot_size);
        out.max_comms = ld(h->max_comms);
        out.record_size = ld(h->record_size);
        out.ring_capacity = ld(h->ring_capacity);
        out.bt_depth = ld(h->bt_depth);
        out.comm_table_offset = ld(h->comm_table_offset);
        out.ring_offset = ld(h->ring_offset);
        out.bt_offset = ld(h->bt_offset);
        out.file_size = ld(h->file_size);
        out.actual_size = size_;
        out.pid = ld(h->pid);
        out.global_rank = ld(h->global_rank);
        out.local_rank = ld(h->local_rank);
        out.world_size = ld(h->world_size);
        out.local_world_size = ld(h->local_world_size);
        out.host = ld_str(h->host);
        out.job_id = ld_str(h->job_id);
        out.start_mono_ns = ld(h->start_mono_ns);
        out.start_real_ns = ld(h->start_real_ns);
        out.boot_id_hash = ld(h->boot_id_hash);
        out.nccl_version = ld(h->nccl_version);
        out.cuda_driver_version = ld(h->cuda_driver_version);
        out.heartbeat_mono_ns = ld(h->heartbeat_mono_ns);
        out.process_state = ld(h->process_state);
        out.num_comms = ld(h->num_comms, std::memory_order_acquire);
        out.write_ticket = ld(h->write_ticket);
        out.dump_request = ld(h->dump_request);
        out.dumps_written = ld(h->dumps_written);
        out.reports_written = ld(h->reports_written);
        out.env = env_entries();
    } catch (...) {
    }
    return out;
}

std::vector<CommInfo> RankFile::comms() const noexcept {
    std::vector<CommInfo> out;
    if (!base_) return out;
    try {
        // num_comms is published (release) after a slot's identity is written, so acquire it first.
        const uint32_t n =
            std::min({ld(header_of(base_)->num_comms, std::memory_order_acquire), max_comms_, usable_comms_});
        out.reserve(n);
        for (uint32_t i = 0; i < n; ++i) {
            const auto* s =
                reinterpret_cast<const disk::CommSlot*>(base_ + comm_table_offset_ + uint64_t(i) * comm_slot_size_);
            CommInfo c;
            c.slot = i;
            c.state = ld(s->state, std::memory_order_acquire);
            c.stall_flags = ld(s->stall_flags);
            c.rank = ld(s->rank);
            c.nranks = ld(s->nranks);
            c.cuda_dev = ld(s->cuda_dev);
            c.blocking = ld(s->blocking);
            c.comm_id = ld(s->comm_id);
            c.parent_id = ld(s->parent_id);
            c.split_color = ld(s->split_color);
            c.split_key = ld(s->split_key);
            c.comm_ptr = ld(s->comm_ptr);
            c.pci_bus_id = ld_str(s->pci_bus_id);
            c.name = ld_str(s->name);
            c.t_init_start_ns = ld(s->t_init_start_ns);
            c.t_init_done_ns = ld(s->t_init_done_ns);
            c.coll_issued = ld(s->coll_issued);
            c.coll_returned = ld(s->coll_returned);
            c.coll_reached = ld(s->coll_reached);
            c.coll_completed = ld(s->coll_completed);
            c.ops_issued = ld(s->ops_issued);
            c.ops_completed = ld(s->ops_completed);
            c.t_last_issue_ns = ld(s->t_last_issue_ns);
            c.t_last_progress_ns = ld(s->t_last_progress_ns);
            c.p2p_sends = ld(s->p2p_sends);
            c.p2p_recvs = ld(s->p2p_recvs);
            c.async_error = ld(s->async_error);
            c.gpu_tracking = ld(s->gpu_tracking);
            c.stall_since_ns = ld(s->stall_since_ns);
            c.untracked_ops = ld(s->untracked_ops);

            // The seqlock: same nonzero seq before and after the copy = a consistent entry. An entry outside its
            // seq % kRecentSigs place is damage, not data.
            c.recent.reserve(disk::kRecentSigs);
            for (uint32_t j = 0; j < disk::kRecentSigs; ++j) {
                const auto& e = s->recent[j];
                const uint64_t seq = ld(e.seq, std::memory_order_acquire);
                if (seq == 0 || seq % disk::kRecentSigs != j) continue;
                SigInfo g;
                g.seq = seq;
                g.count = lda(e.count);
                g.t_issue_ns = lda(e.t_issue_ns);
                g.op = lda(e.op);
                g.dtype = lda(e.dtype);
                g.flags = lda(e.flags);
                g.redop = lda(e.redop);
                g.root = lda(e.root);
                g.tid = lda(e.tid);
                g.stream = lda(e.stream);
                if (ld(e.seq) != seq) continue;
                c.recent.push_back(g);
            }
            std::sort(c.recent.begin(), c.recent.end(),
                      [](const SigInfo& a, const SigInfo& b) { return a.seq < b.seq; });
            out.push_back(std::move(c));
        }
    } catch (...) {
    }
    return out;
}

RecordSet RankFile::records(uint64_t since_ticket) const noexcept {
    RecordSet set;
    if (!base_) return set;
    try {
        const uint64_t wt = ld(header_of(base_)->write_ticket, std::memory_order_acquire);
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
            const auto* r = reinterpret_cast<const disk::OpRecord*>(base_ + off);
            const uint64_t want = 2 * t + 2;
            const uint64_t s1 = ld(r->stamp, std::memory_order_acquire);
            if (s1 != want) {
                // A later stamp: the slot already holds a newer lap's record. Anything else: not written yet,
                // being written, or damaged.
                ++(s1 > want ? set.dropped : set.torn);
                continue;
            }
            Record x;
            x.ticket = t;
            x.comm_id = lda(r->comm_id);
            x.seq = lda(r->seq);
            x.op_index = lda(r->op_index);
            x.count = lda(r->count);
            x.sendbuf = lda(r->sendbuf);
            x.recvbuf = lda(r->recvbuf);
            x.stream = lda(r->stream);
            x.t_issue_ns = lda(r->t_issue_ns);
            x.t_return_ns = ld(r->t_return_ns, std::memory_order_acquire);
            x.t_reached_ns = ld(r->t_reached_ns, std::memory_order_acquire);
            x.t_done_ns = ld(r->t_done_ns, std::memory_order_acquire);
            x.tid = lda(r->tid);
            x.group_id = lda(r->group_id);
            x.op = lda(r->op);
            x.dtype = lda(r->dtype);
            x.flags = lda(r->flags);
            x.peer_or_root = lda(r->peer_or_root);
            x.redop = lda(r->redop);
            x.result = ld(r->result, std::memory_order_acquire);
            x.comm_slot = lda(r->comm_slot);
            const uint64_t s2 = ld(r->stamp);
            if (s2 != s1) {
                ++(s2 > want ? set.dropped : set.torn);
                continue;
            }
            if (!known_op(x.op)) {
                ++set.unknown_op;
                continue;
            }
            set.records.push_back(x);
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

bool request_dump(const std::string& path, std::string* error) noexcept {
    auto err = [&](const std::string& msg) {
        try {
            if (error) *error = msg;
        } catch (...) {
        }
        return false;
    };
    try {
        const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) return err("cannot open for writing: " + errno_str(errno));
        struct stat st {};
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) < sizeof(disk::FileHeader)) {
            ::close(fd);
            return err("not a rank file (too small or not a regular file)");
        }
        void* p = mmap(nullptr, sizeof(disk::FileHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        const int e = errno;
        ::close(fd);
        if (p == MAP_FAILED) return err("cannot map: " + errno_str(e));
        auto* h = static_cast<disk::FileHeader*>(p);
        bool ok = memcmp(h->magic, disk::kMagic, sizeof h->magic) == 0 && ld(h->major) == disk::kFormatMajor;
        if (ok) h->dump_request.fetch_add(1, std::memory_order_release);
        munmap(p, sizeof(disk::FileHeader));
        return ok ? true : err("not a rank file of format 1.x");
    } catch (...) {
        return err("cannot request a dump: unknown error");
    }
}

// ---- Liveness ----

LivenessContext live_context(uint64_t now_mono_ns, double stale_after_s) {
    LivenessContext c;
    c.live = true;
    c.now_mono_ns = now_mono_ns;
    c.stale_after_s = stale_after_s;
    try {
        c.host = this_hostname();
    } catch (...) {
    }
    c.boot_id_hash = this_boot_id_hash();
    return c;
}

verdict::RankCommState to_rank_comm_state(const HeaderInfo& h, const CommInfo& c, const std::string& file,
                                          const LivenessContext& ctx) noexcept {
    verdict::RankCommState s;
    try {
        s.comm_rank = c.rank;
        s.global_rank = h.global_rank;
        s.host = h.host;
        s.pid = h.pid;
        s.file = file;

        s.exited_clean = h.process_state == uint32_t(disk::ProcessState::ExitedClean);
        s.alive = !s.exited_clean;
        const bool same_boot = h.boot_id_hash != 0 && h.boot_id_hash == ctx.boot_id_hash;
        // Monotonic clocks of different boots do not compare: live, the age of a foreign file's heartbeat is unknown.
        const bool can_age = !ctx.live || same_boot;
        if (can_age && h.heartbeat_mono_ns && ctx.now_mono_ns) {
            s.heartbeat_age_s =
                ctx.now_mono_ns > h.heartbeat_mono_ns ? double(ctx.now_mono_ns - h.heartbeat_mono_ns) / 1e9 : 0.0;
            // Never less than three of this process's heartbeats (its watchdog writes one per poll).
            double poll_s = 0.1;
            for (const auto& e : h.env)
                if (e.rfind("NCCLWATCH_POLL_MS=", 0) == 0) poll_s = std::max(0.01, atof(e.c_str() + 18) / 1000.0);
            if (s.heartbeat_age_s > std::max(ctx.stale_after_s, 3 * poll_s)) s.alive = false;
        }
        // pid must be > 0: kill(0, ...) and kill(-1, ...) address process groups. Same host name AND boot, so a
        // different container or a rebooted node with a reused pid is never probed.
        if (ctx.live && s.alive && same_boot && !h.host.empty() && h.host == ctx.host && h.pid > 0 &&
            h.pid <= INT_MAX) {
            if (kill(pid_t(h.pid), 0) != 0 && errno != EPERM) s.alive = false;
        }

        s.issued = c.coll_issued;
        s.reached = c.coll_reached;
        s.completed = c.coll_completed;
        s.gpu_tracking = c.gpu_tracking != 0;
        s.t_last_issue_ns = c.t_last_issue_ns;
        s.t_last_progress_ns = c.t_last_progress_ns;
        s.stall_since_ns = c.stall_since_ns;
        s.async_error = c.async_error;
        s.comm_state = c.state;
        s.cuda_dev = c.cuda_dev;
        s.pci_bus_id = c.pci_bus_id;
        s.t_init_start_ns = c.t_init_start_ns;
        s.t_init_done_ns = c.t_init_done_ns;
        s.recent.reserve(c.recent.size());
        for (const auto& g : c.recent) {
            verdict::OpSig o;
            o.seq = g.seq;
            o.op = g.op;
            o.dtype = g.dtype;
            o.redop = g.redop;
            o.root = g.root;
            o.count = g.count;
            o.t_issue_ns = g.t_issue_ns;
            o.tid = g.tid;
            o.stream = g.stream;
            o.flags = g.flags;
            s.recent.push_back(o);
        }
    } catch (...) {
    }
    return s;
}

// ---- Finding files ----

std::vector<std::string> list_rank_files(const std::string& dir, bool recursive,
                                         std::vector<std::string>* errors) noexcept {
    std::vector<std::string> out;
    try {
        auto note = [&](const std::string& what, const std::error_code& ec) {
            if (errors) errors->push_back(what + ": " + ec.message());
        };
        auto consider = [&](const fs::directory_entry& e) {
            std::error_code ec;
            if (e.path().extension() == ".ncw" && e.is_regular_file(ec)) out.push_back(e.path().string());
        };
        std::error_code ec;
        if (!recursive) {
            fs::directory_iterator it(dir, ec), end;
            for (; !ec && it != end; it.increment(ec)) consider(*it);
        } else {
            fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
            for (; !ec && it != end; it.increment(ec)) consider(*it);
        }
        if (ec) note(dir, ec);
        std::sort(out.begin(), out.end());
    } catch (...) {
    }
    return out;
}

}  // namespace ncw

// The rank-file reader: mapping a file, validating its header once, asking its writer for a dump, and finding rank
// files. The snapshots are in rank_file_snapshot.cpp, liveness in liveness.cpp. Every read of the mapping is an
// atomic load (read/mapped_load.h): the writer is another process (or thread) updating the same pages.
#include "read/rank_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "ncclwatch/format.h"
#include "read/mapped_load.h"

namespace ncw {

using mapped::header_of;
using mapped::ld;
using mapped::lda;

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

}  // namespace

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

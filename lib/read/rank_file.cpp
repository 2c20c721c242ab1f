// The rank-file reader: opening a file, validating its header once, copying its bytes (pread), asking its writer for a
// dump, and finding rank files. The snapshots are in rank_file_snapshot.cpp, liveness in liveness.cpp. The copies
// land in our own buffers, read with atomic loads (read/mapped_load.h) as the memory of open_memory is.
#include "read/rank_file.h"

#include <fcntl.h>
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
#include <tuple>
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
constexpr uint32_t kMaxPyStacksCapacity = 1u << 24;

std::string errno_str(int e) { return std::error_code(e, std::generic_category()).message(); }

void note_read_error(std::string& slot, const std::string& msg) noexcept {
    try {
        slot = msg;
    } catch (...) {
        slot = "?";  // a short string fits without allocating
    }
    if (slot.empty()) slot = "?";
}

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
    read_error_ = std::move(o.read_error_);
    fd_ = std::exchange(o.fd_, -1);
    mem_ = std::exchange(o.mem_, nullptr);
    open_ = std::exchange(o.open_, false);
    size_ = std::exchange(o.size_, 0);
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
    env_offset_ = o.env_offset_;  // (not moved before 1.5: a moved-to reader, the watchdog's, lost the region)
    env_capacity_ = o.env_capacity_;
    py_stacks_offset_ = o.py_stacks_offset_;
    py_stacks_capacity_ = o.py_stacks_capacity_;
    py_held_offset_ = o.py_held_offset_;
    py_held_capacity_ = o.py_held_capacity_;
    return *this;
}

void RankFile::close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    mem_ = nullptr;
    open_ = false;
    size_ = 0;
    read_error_.clear();
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
        // Kept open and read with pread: anyone may truncate the file meanwhile (a mapping would then SIGBUS us).
        // Every read names its exact range: the kernel's readahead (up to the device's window, megabytes) would only
        // read what we never use, and on a cold cache that is most of the I/O.
        posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
        fd_ = fd;
        size_ = size_t(st.st_size);
        open_ = true;
        read_error_.clear();
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
        mem_ = static_cast<const unsigned char*>(base);
        size_ = size;
        open_ = true;
        read_error_.clear();
        return validate();
    } catch (...) {
        return fail("cannot read: out of memory");
    }
}

bool RankFile::fetch(uint64_t off, void* dst, size_t n) const noexcept {
    if (!read_error_.empty()) return false;
    if (off > size_ || n > size_ - off) {
        note_read_error(read_error_, strf("read past the size at open (%llu bytes at %llu of %zu)",
                                          (unsigned long long)n, (unsigned long long)off, size_));
        return false;
    }
    if (mem_) {
        mapped::copy_live(dst, mem_ + off, n);  // our own memory (never shrinks), written by our threads meanwhile
        return true;
    }
    size_t done = 0;
    while (done < n) {
        const ssize_t r = pread(fd_, static_cast<unsigned char*>(dst) + done, n - done, off_t(off + done));
        if (r > 0) {
            done += size_t(r);
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else {
            const int e = r < 0 ? errno : 0;
            note_read_error(read_error_, r == 0 ? strf("shrank while being read: it ends before byte %llu of %zu",
                                                       (unsigned long long)(off + done), size_)
                                                : "read failed: " + errno_str(e));
            return false;
        }
    }
    return true;
}

void RankFile::prefetch(uint64_t ring_records) const noexcept {
    if (!open_ || fd_ < 0 || !read_error_.empty()) return;
    alignas(8) unsigned char hbuf[sizeof(disk::FileHeader)];
    if (!fetch(0, hbuf, sizeof hbuf)) return;  // validate() read it: in the page cache
    const auto* h = header_of(hbuf);
    auto advise = [&](uint64_t off, uint64_t n) {
        if (off >= size_ || n == 0) return;
        posix_fadvise(fd_, off_t(off), off_t(std::min<uint64_t>(n, size_ - off)), POSIX_FADV_WILLNEED);
    };
    const uint32_t comms = std::min({ld(h->num_comms), max_comms_, usable_comms_});
    advise(comm_table_offset_, uint64_t(comms) * comm_slot_size_);
    if (env_capacity_) advise(env_offset_, std::min<uint64_t>(ld(h->env_bytes), env_capacity_));
    if (py_stacks_capacity_) advise(py_stacks_offset_, std::min<uint32_t>(ld(h->py_stacks_len), py_stacks_capacity_));
    if (py_held_capacity_) advise(py_held_offset_, std::min<uint32_t>(ld(h->py_held_len), py_held_capacity_));
    // The newest ring_records slots, in at most two runs (the ring wraps).
    const uint64_t wt = ld(h->write_ticket), cap = ring_capacity_;
    const uint64_t n = std::min({ring_records, wt, cap});
    if (n == 0) return;
    const uint64_t first = (wt - n) & (cap - 1);
    const uint64_t run = std::min(n, cap - first);
    advise(ring_offset_ + first * record_size_, run * record_size_);
    if (run < n) advise(ring_offset_, (n - run) * record_size_);
}

bool RankFile::check_size() const noexcept {
    if (!open_ || !read_error_.empty()) return read_error_.empty();
    if (fd_ < 0) return true;
    struct stat st {};
    if (fstat(fd_, &st) != 0) {
        note_read_error(read_error_, "cannot stat: " + errno_str(errno));
        return false;
    }
    // Replaced (renamed over) or deleted since it was opened: the path names another file now, or none, and this
    // descriptor would go on reading the old one for ever.
    if (st.st_nlink == 0) {
        note_read_error(read_error_, "replaced or deleted since it was opened");
        return false;
    }
    if (uint64_t(st.st_size) == size_) return true;
    note_read_error(read_error_, strf("changed size while being read: %zu bytes when opened, %llu now", size_,
                                      (unsigned long long)st.st_size));
    return false;
}

bool RankFile::validate() noexcept {
    // A copy of the header: the bytes the file has of it, zeros after (size checks below stop at what is missing).
    alignas(8) unsigned char hbuf[sizeof(disk::FileHeader)] = {};
    if (!fetch(0, hbuf, std::min(size_, sizeof hbuf))) return fail(read_error_);
    const auto* h = header_of(hbuf);
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
    // Before 1.5 a slot ended at kCommSlotBytes14 (the reader zeroes what follows: read/rank_file_snapshot.cpp).
    const size_t min_slot = minor >= 5 ? sizeof(disk::CommSlot) : disk::kCommSlotBytes14;
    if (slot < min_slot || slot > kMaxCommSlotSize || slot % 8)
        return fail(strf("corrupt header: comm_slot_size %u (need a multiple of 8, >= %zu)", slot, min_slot));
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
    validate_env_region(h, minor, std::max(ring_end, bt_end), file_size);
    const uint64_t before_py = std::max({ring_end, bt_end, env_offset_ + env_capacity_});
    py_stacks_offset_ = py_held_offset_ = 0;
    py_stacks_capacity_ = py_held_capacity_ = 0;
    if (minor >= 5)
        std::tie(py_stacks_offset_, py_stacks_capacity_) = validate_optional_region(
            ld(h->py_stacks_offset), ld(h->py_stacks_capacity), before_py, file_size, "Python stacks");
    if (minor >= 8)
        std::tie(py_held_offset_, py_held_capacity_) = validate_optional_region(
            ld(h->py_held_offset), ld(h->py_held_capacity),
            std::max(before_py, py_stacks_offset_ + py_stacks_capacity_), file_size, "held Python stacks");

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
            } else if (!env_capacity_ || size_ < env_offset_ + env_capacity_) {
                what = "environment region cut";
            } else {
                what = "Python stacks region cut";
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
void RankFile::validate_env_region(const void* header, uint16_t minor, uint64_t regions_end,
                                   uint64_t file_size) noexcept {
    env_offset_ = 0;
    env_capacity_ = 0;
    if (minor < 1) return;
    const auto* h = static_cast<const disk::FileHeader*>(header);
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

// The Python stacks regions (1.5, 1.8) are optional evidence too: damaged, each is ignored with a warning.
std::pair<uint64_t, uint32_t> RankFile::validate_optional_region(uint64_t off, uint32_t cap, uint64_t regions_end,
                                                                 uint64_t file_size, const char* what) noexcept {
    if (off == 0 && cap == 0) return {0, 0};
    if (cap > kMaxPyStacksCapacity || off < regions_end || off > kMaxOffset || off + cap > file_size) {
        try {
            warnings_.push_back(strf("%s region ignored: offset %llu, %u bytes (regions end at %llu, file size %llu)",
                                     what, (unsigned long long)off, cap, (unsigned long long)regions_end,
                                     (unsigned long long)file_size));
        } catch (...) {
        }
        return {0, 0};
    }
    return {off, cap};
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
        // pread/pwrite, not a mapping: the file may shrink meanwhile. Not an atomic increment: two requests racing
        // may count once, but the writer dumps on any change of the counter, so each still gets its dump.
        alignas(8) unsigned char hbuf[sizeof(disk::FileHeader)];
        const auto* h = header_of(hbuf);
        constexpr size_t kAt = offsetof(disk::FileHeader, dump_request);
        bool ok = pread(fd, hbuf, sizeof hbuf, 0) == ssize_t(sizeof hbuf) &&
                  memcmp(h->magic, disk::kMagic, sizeof h->magic) == 0 && ld(h->major) == disk::kFormatMajor;
        if (!ok) {
            ::close(fd);
            return err("not a rank file of format 1.x");
        }
        const uint64_t next = ld(h->dump_request) + 1;
        const bool wrote = pwrite(fd, &next, sizeof next, kAt) == ssize_t(sizeof next);
        const int e = errno;
        ::close(fd);
        return wrote ? true : err("cannot write the request: " + errno_str(e));
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
        // Only stat, never open: a FIFO named *.ncw must not block us. What is skipped is named, not silently lost.
        auto consider = [&](const fs::directory_entry& e) {
            if (e.path().extension() != ".ncw") return;
            std::error_code ec;
            const fs::file_status st = fs::status(e.path(), ec);
            if (!ec && fs::is_regular_file(st)) {
                out.push_back(e.path().string());
                return;
            }
            if (!errors) return;
            std::error_code lec;
            const bool link = fs::is_symlink(fs::symlink_status(e.path(), lec));
            const char* what = link && fs::status_known(st) && !fs::exists(st)      ? "a dangling symbolic link"
                               : ec                                                 ? nullptr
                               : fs::is_fifo(st)                                    ? "a FIFO"
                               : fs::is_block_file(st) || fs::is_character_file(st) ? "a device"
                               : fs::is_directory(st)                               ? "a folder"
                               : fs::is_socket(st)                                  ? "a socket"
                                                                                    : "not a regular file";
            errors->push_back(e.path().string() + ": skipped: " + (what ? what : "cannot stat: " + ec.message()));
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

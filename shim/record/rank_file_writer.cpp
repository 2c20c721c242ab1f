#include "shim/record/rank_file_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "read/rank_file.h"  // this_boot_id_hash: the readers compare with the same value
#include "read/safe_write.h"
#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/record/own_mapping.h"

namespace ncw {

bool write_file_atomic(const std::string& path, const std::string& content, std::string* why) {
    const size_t name_at = path.rfind('/');
    const size_t job_at =
        name_at == std::string::npos || name_at == 0 ? std::string::npos : path.rfind('/', name_at - 1);
    if (job_at == std::string::npos) {
        if (why) *why = path + ": not ROOT/JOB/NAME";
        return false;
    }
    return files::write_job_file(path.substr(0, job_at), path.substr(job_at + 1, name_at - job_at - 1),
                                 path.substr(name_at + 1), content, true, why);
}

namespace {

void fill_header(disk::FileHeader* h, const disk::Layout& l, const ProcessIdentity& id) {
    disk::init_header(*h, l);
    h->pid = id.pid;
    h->global_rank = id.global_rank;
    h->local_rank = id.local_rank;
    h->world_size = id.world_size;
    h->local_world_size = id.local_world_size;
    snprintf(h->host, sizeof(h->host), "%s", id.host.c_str());
    snprintf(h->job_id, sizeof(h->job_id), "%s", id.job_id.c_str());
    h->start_mono_ns = now_mono_ns();
    h->start_real_ns = now_real_ns();
    h->boot_id_hash = this_boot_id_hash();
    h->heartbeat_mono_ns.store(h->start_mono_ns);
    h->process_state.store(uint32_t(disk::ProcessState::Running));
    disk::seal_header(*h);
}

// Maps `size` bytes of `fd` after reserving its blocks: writing to a mapped page with no block behind it (full disk)
// would raise SIGBUS in the training process, so the space is claimed up front where the error is a return code.
uint8_t* map_file(int fd, size_t size, std::string& why) {
    if (ftruncate(fd, off_t(size)) != 0) {
        why = std::string("ftruncate: ") + strerror(errno);
        return nullptr;
    }
    int rc = posix_fallocate(fd, 0, off_t(size));
    if (rc != 0) {
        why = std::string("reserving ") + std::to_string(size) + " bytes: " + strerror(rc);
        return nullptr;
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        why = std::string("mmap: ") + strerror(errno);
        return nullptr;
    }
    return static_cast<uint8_t*>(p);
}

}  // namespace

RankFileWriter create_rank_file(const std::string& root_dir, const ProcessIdentity& id, uint32_t ring_capacity,
                                uint32_t bt_depth) {
    RankFileWriter w;
    disk::Layout l = disk::compute_layout(ring_capacity, disk::kMaxComms, bt_depth);
    w.size = l.file_size;
    w.job_dir = root_dir + "/" + id.job_id;
    std::string rank = id.global_rank >= 0 ? std::to_string(id.global_rank) : "x";
    const std::string stem = "rank" + rank + "-" + sanitize_component(id.host) + "-" + std::to_string(id.pid);
    w.base_path = w.job_dir + "/" + stem;
    w.path = w.base_path + ".ncw";

    // The job folder is made 0750 and never followed if a symlink is there (read/safe_write.h); nor is the file.
    std::string why;
    std::string risks;
    const int dir = files::open_job_dir(root_dir, id.job_id, &why, &risks);
    // Said once, at the start, and the shim runs on: the folder is the operator's choice, and a warning is all the
    // help we can give (refusing would cost the job its evidence, not the attacker their access).
    if (!risks.empty())
        log().warn(
            "the dump folder is not yours alone: {}. Whoever can write there can plant, replace or remove the "
            "rank, report and dump files",
            risks);
    if (dir >= 0) {
        // The name holds the pid, so anyone who can write to the folder can take it first (a symlink, a file): then
        // another name, the same with ".N" before ".ncw" (readers take any *.ncw and read the rank from the header),
        // then names no one can guess, rather than no file at all.
        int fd = -1;
        std::string name;
        for (int n = 0; n < kRankFileNameTries && fd < 0; ++n) {
            std::string alt;
            if (n > 0 && n <= 3) {
                alt = "." + std::to_string(n);
            } else if (n > 3) {
                char hex[24];
                snprintf(hex, sizeof hex, ".%08x", unsigned(files::unguessable_bits()));
                alt = hex;
            }
            name = stem + alt + ".ncw";
            fd = openat(dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
            if (fd < 0 && errno != EEXIST) break;  // not a name taken: another name would fail the same way
            if (fd >= 0 && n > 0) {
                log().warn(
                    "the rank file name {} is taken (by a file of an earlier run with the same job id and pid, or a "
                    "file or symlink put there by someone who can write to {}); recording to {} instead",
                    w.path, w.job_dir, w.job_dir + "/" + name);
                w.base_path = w.job_dir + "/" + stem + alt;
                w.path = w.base_path + ".ncw";
            }
        }
        if (fd < 0) {
            why = errno == EEXIST ? w.path + " and " + std::to_string(kRankFileNameTries - 1) +
                                        " other names: all taken (files or symlinks put there first)"
                                  : w.job_dir + "/" + name + ": " + strerror(errno);
        } else {
            w.base = map_file(fd, w.size, why);
            close(fd);  // the mapping keeps the file
            if (!w.base) {
                why = w.path + ": " + why;
                unlinkat(dir, name.c_str(), 0);
            }
        }
        close(dir);
    }
    if (w.base) {
        w.file_backed = true;
        own_mapping_set(w.base, w.size);
    } else {
        log().error(
            "cannot keep a rank file ({}); recording in memory only: a crash will not leave evidence. Set "
            "NCCLWATCH_DIR to a writable folder with {} KiB free",
            why, w.size / 1024);
        void* p = mmap(nullptr, w.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return RankFileWriter{};
        w.base = static_cast<uint8_t*>(p);
    }
    w.hdr = reinterpret_cast<disk::FileHeader*>(w.base);
    w.comms = reinterpret_cast<disk::CommSlot*>(w.base + l.comm_table_offset);
    w.ring = reinterpret_cast<disk::OpRecord*>(w.base + l.ring_offset);
    w.frames = bt_depth ? reinterpret_cast<uint64_t*>(w.base + l.bt_offset) : nullptr;
    w.env = reinterpret_cast<char*>(w.base + l.env_offset);
    w.env_capacity = l.env_capacity;
    w.ring_mask = ring_capacity - 1;
    w.bt_depth = bt_depth;
    fill_header(w.hdr, l, id);
    return w;
}

size_t append_env_entries(RankFileWriter& w, const std::vector<std::string>& entries, size_t keep_free) {
    if (!w.hdr || !w.env) return entries.size();
    uint64_t used = w.hdr->env_bytes.load(std::memory_order_relaxed);
    size_t skipped = 0;
    for (const auto& e : entries) {
        // An entry with a NUL in it would read back as two: environment strings cannot hold one, facts must not.
        const size_t n = e.size() + 1;
        if (e.empty() || memchr(e.data(), '\0', e.size()) || used + n + keep_free > w.env_capacity) {
            ++skipped;
            continue;
        }
        memcpy(w.env + used, e.c_str(), n);
        used += n;
    }
    w.hdr->env_bytes.store(used, std::memory_order_release);
    return skipped;
}

}  // namespace ncw

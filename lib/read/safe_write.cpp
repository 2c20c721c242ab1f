#include "read/safe_write.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "ncclwatch/hash.h"

namespace ncw::files {

namespace {

// Closes fd keeping errno as it was.
void close_keep_errno(int fd) {
    const int e = errno;
    close(fd);
    errno = e;
}

bool write_all(int fd, const std::string& text) {
    size_t off = 0;
    while (off < text.size()) {
        const ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) errno = ENOSPC;
        if (n <= 0) return false;
        off += size_t(n);
    }
    return true;
}

std::string reason(const std::string& what) { return what + ": " + strerror(errno); }

}  // namespace

// The kernel's, else a mix of the clock, the pid and a counter (splitmix64).
uint64_t unguessable_bits() {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == ssize_t(sizeof v)) return v;
    static std::atomic<uint64_t> counter{0};
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t z = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    z ^= uint64_t(getpid()) << 32 ^ (counter.fetch_add(1) + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

std::string folder_risk(int dir_fd, const std::string& path) {
    const int e = errno;
    struct stat st {};
    std::string out;
    if (fstat(dir_fd, &st) == 0) {
        char mode[8];
        snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
        // The sticky bit keeps others from renaming or removing what is ours (as in /tmp); without it, write access
        // to the folder is write access to every name in it.
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
            out = path + " is writable by " + ((st.st_mode & S_IWOTH) ? "everyone" : "its group") + " (mode " + mode +
                  ") without the sticky bit: chmod go-w " + path + ", or use a folder only you can write to";
        const uid_t me = geteuid();
        if (st.st_uid != me && st.st_uid != 0) {
            if (!out.empty()) out += "; ";
            out += path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                   std::to_string(me) + ") or root: use a folder you own";
        }
    }
    errno = e;
    return out;
}

std::string job_component(const std::string& id, size_t max) {
    std::string out;
    out.reserve(std::min(id.size(), max));
    for (char c : id)
        out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    const bool reserved = out.empty() || out == "." || out == "..";
    if (out == id && out.size() <= max && !reserved) return out;
    const std::string tag = fmt::format("-{:08x}", uint32_t(fnv1a64(id.data(), id.size())));
    if (reserved) out = "job";
    max = std::max(max, tag.size() + 3);
    if (out.size() > max - tag.size()) out.resize(max - tag.size());
    return out + tag;
}

std::string make_dirs(const std::string& path, unsigned mode) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); ++i) {
        if ((i == path.size() || path[i] == '/') && !cur.empty() && mkdir(cur.c_str(), mode) != 0 && errno != EEXIST)
            return reason(cur);
        if (i < path.size()) cur += path[i];
    }
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return reason(path);
    if (!S_ISDIR(st.st_mode)) return path + ": not a folder";
    if (access(path.c_str(), W_OK | X_OK) != 0) return reason(path);
    return "";
}

int open_job_dir(const std::string& parent, const std::string& name, std::string* why, std::string* risks) {
    const std::string path = parent + "/" + name;
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        if (why) *why = path + ": not a single folder name";
        errno = EINVAL;
        return -1;
    }
    std::string err = make_dirs(parent, 0750);
    if (!err.empty()) {
        if (why) *why = err;
        return -1;
    }
    const int out = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out < 0) {
        if (why) *why = reason(parent);
        return -1;
    }
    if (mkdirat(out, name.c_str(), 0750) != 0 && errno != EEXIST) {
        if (why) *why = reason(path);
        close_keep_errno(out);
        return -1;
    }
    const int dir = openat(out, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0 && why) {
        // ELOOP / ENOTDIR: a symlink or a file where the job folder should be.
        *why = errno == ELOOP || errno == ENOTDIR ? path + ": not a folder (a symlink or a file is refused)"
                                                  : reason(path);
    }
    if (risks) {
        // Both descriptors, not the names: what is judged is the folder we write into, whatever is renamed meanwhile.
        *risks = folder_risk(out, parent);
        const std::string job = dir >= 0 ? folder_risk(dir, path) : std::string();
        if (!job.empty()) *risks += (risks->empty() ? "" : "; ") + job;
    }
    close_keep_errno(out);
    return dir;
}

bool write_file_at(int dir_fd, const std::string& name, const std::string& text, bool durable, std::string* why) {
    std::string tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
        char suffix[24];
        snprintf(suffix, sizeof suffix, ".%016llx.tmp", static_cast<unsigned long long>(unguessable_bits()));
        tmp = name + suffix;
        fd = openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (fd < 0 && errno != EEXIST) break;  // EEXIST: something is there already (planted?): another name
    }
    if (fd < 0) {
        if (why) *why = reason(tmp);
        return false;
    }
    const char* step = "write";
    bool ok = write_all(fd, text);
    if (ok && durable && fsync(fd) != 0 && errno != EINVAL) {
        step = "fsync";
        ok = false;
    }
    if (!ok) close_keep_errno(fd);
    if (ok && close(fd) != 0) {
        step = "close";
        ok = false;
    }
    if (ok && renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
        step = "rename";
        ok = false;
    }
    if (!ok) {
        if (why) *why = reason(tmp + ": " + step);
        const int e = errno;
        unlinkat(dir_fd, tmp.c_str(), 0);
        errno = e;
    }
    return ok;
}

bool write_job_file(const std::string& parent, const std::string& job, const std::string& name, const std::string& text,
                    bool durable, std::string* why, std::string* job_risk) {
    const int dir = open_job_dir(parent, job, why);
    if (dir < 0) return false;
    if (job_risk) *job_risk = folder_risk(dir, parent + "/" + job);
    std::string err;
    const bool ok = write_file_at(dir, name, text, durable, &err);
    if (!ok && why) *why = parent + "/" + job + "/" + err;
    close_keep_errno(dir);
    return ok;
}

}  // namespace ncw::files

// The live report's files: OUT/<job>/NAME, where <job> is named by a client. Nothing planted there is followed: the
// job folder is opened without following a symlink, the text goes to a temporary file of a fresh name created with
// O_EXCL|O_NOFOLLOW (mode 0640, whatever the umask allows of it), and a rename puts it in place; a symlink at the
// final name is replaced as an entry, never written through.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "live/live_impl.h"

namespace ncw::live {

namespace {

// OUT itself is the operator's choice (a symlink there is theirs to make): created as needed, followed.
bool mkdirs(const std::string& dir) {
    std::string cur;
    for (size_t i = 0; i <= dir.size(); ++i) {
        if (i == dir.size() || dir[i] == '/') {
            if (!cur.empty() && mkdir(cur.c_str(), 0750) != 0 && errno != EEXIST) return false;
        }
        if (i < dir.size()) cur += dir[i];
    }
    return true;
}

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
        if (n <= 0) return false;
        off += size_t(n);
    }
    return true;
}

}  // namespace

bool LiveServer::Impl::write_report_file(const std::string& job_dir_name, const char* name, const std::string& text) {
    if (!mkdirs(opt.out_dir)) return false;
    const int out = open(opt.out_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out < 0) return false;
    if (mkdirat(out, job_dir_name.c_str(), 0750) != 0 && errno != EEXIST) {
        close_keep_errno(out);
        return false;
    }
    const int dir = openat(out, job_dir_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close_keep_errno(out);
    if (dir < 0) return false;  // ELOOP / ENOTDIR: a symlink or a file where the job folder should be
    const std::string tmp = fmt::format("{}.{}.{}.tmp", name, getpid(), ++tmp_counter);
    const int fd = openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd < 0) {
        close_keep_errno(dir);
        return false;
    }
    bool ok = write_all(fd, text);
    if (!ok) close_keep_errno(fd);
    ok = ok && close(fd) == 0 && renameat(dir, tmp.c_str(), dir, name) == 0;
    if (!ok) {
        const int e = errno;
        unlinkat(dir, tmp.c_str(), 0);
        errno = e;
    }
    close_keep_errno(dir);
    return ok;
}

}  // namespace ncw::live

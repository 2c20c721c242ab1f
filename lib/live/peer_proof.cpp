// Who is at the other end of a loopback connection (see peer_proof.h).
#include "live/peer_proof.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "ncclwatch/format.h"
#include "read/time_base.h"

namespace ncw::live {

namespace {

struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

struct Dir {
    DIR* d = nullptr;
    explicit Dir(DIR* x) : d(x) {}
    ~Dir() {
        if (d) closedir(d);
    }
    Dir(const Dir&) = delete;
    Dir& operator=(const Dir&) = delete;
};

// A descriptor's /proc link, PATH relative to dir_fd (AT_FDCWD: as is): false when there is none; else *inode is the
// socket it is ("socket:[INODE]"), 0 for anything else.
bool read_fd_link(int dir_fd, const char* path, uint64_t* inode) {
    char target[64];
    const ssize_t n = readlinkat(dir_fd, path, target, sizeof target - 1);
    if (n <= 0) return false;
    target[n] = 0;
    *inode = n > 8 && strncmp(target, "socket:[", 8) == 0 ? strtoull(target + 8, nullptr, 10) : 0;
    return true;
}

// Whether /proc/PID/fd exists but may not be read here (another user's process, and no right to it: not root).
bool fd_dir_denied(int64_t pid, const std::string& proc_root) {
    DIR* d = opendir(fmt::format("{}/{}/fd", proc_root, pid).c_str());
    const int e = errno;
    if (d) closedir(d);
    return !d && (e == EACCES || e == EPERM);
}

// The real and effective uid and the effective gid of /proc/PID/status; false when it cannot be read.
struct StatusIds {
    uint32_t ruid = 0, euid = 0, egid = 0;
    bool gid_known = false;
};
bool status_ids(int64_t pid, const std::string& proc_root, StatusIds& out) {
    FILE* f = fopen(fmt::format("{}/{}/status", proc_root, pid).c_str(), "re");
    if (!f) return false;
    char line[512];
    bool uid = false;
    while (fgets(line, sizeof line, f)) {
        unsigned a = 0, b = 0;
        if (strncmp(line, "Uid:", 4) == 0 && sscanf(line + 4, "%u %u", &a, &b) == 2) {
            out.ruid = a;
            out.euid = b;
            uid = true;
        } else if (strncmp(line, "Gid:", 4) == 0 && sscanf(line + 4, "%u %u", &a, &b) == 2) {
            out.egid = b;
            out.gid_known = true;
        }
    }
    fclose(f);
    return uid;
}

bool all_digits(const char* s) {
    if (!*s) return false;
    for (; *s; ++s)
        if (*s < '0' || *s > '9') return false;
    return true;
}

// The exact socket whose source is `peer` and destination `local` (the far end of our connection): sock_diag, no
// dump (one answer, whatever the host's socket count).
bool diag_lookup(const sockaddr_storage& peer, const sockaddr_storage& local, PeerSocket& out, std::string* why,
                 bool* answered) {
    Fd nl(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
    if (nl.fd < 0) {
        if (why) *why = std::string("sock_diag: ") + strerror(errno);
        return false;
    }
    timeval tv{0, 50000};
    setsockopt(nl.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct {
        nlmsghdr nlh;
        inet_diag_req_v2 req;
    } msg{};
    msg.nlh.nlmsg_len = sizeof msg;
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST;
    msg.req.sdiag_family = uint8_t(peer.ss_family);
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = ~0u;
    msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (peer.ss_family == AF_INET) {
        const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
        const auto* l = reinterpret_cast<const sockaddr_in*>(&local);
        msg.req.id.idiag_sport = p->sin_port;
        msg.req.id.idiag_dport = l->sin_port;
        memcpy(msg.req.id.idiag_src, &p->sin_addr, 4);
        memcpy(msg.req.id.idiag_dst, &l->sin_addr, 4);
    } else if (peer.ss_family == AF_INET6) {
        const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
        const auto* l = reinterpret_cast<const sockaddr_in6*>(&local);
        msg.req.id.idiag_sport = p->sin6_port;
        msg.req.id.idiag_dport = l->sin6_port;
        memcpy(msg.req.id.idiag_src, &p->sin6_addr, 16);
        memcpy(msg.req.id.idiag_dst, &l->sin6_addr, 16);
    } else {
        if (why) *why = "not an IP connection";
        return false;
    }
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(nl.fd, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
        if (why) *why = std::string("sock_diag: ") + strerror(errno);
        return false;
    }
    alignas(nlmsghdr) char buf[8192];
    const ssize_t n = recv(nl.fd, buf, sizeof buf, 0);
    if (n <= 0) {
        if (why) *why = std::string("sock_diag: ") + (n < 0 ? strerror(errno) : "no answer");
        return false;
    }
    int len = int(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
            if (why) *why = std::string("sock_diag: ") + strerror(-e->error);
            if (answered) *answered = true;  // the kernel looked: no such socket (the peer went)
            return false;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
        const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        out.uid = m->idiag_uid;
        out.inode = m->idiag_inode;
        return out.inode != 0;
    }
    if (why) *why = "sock_diag: no such socket";
    return false;
}

// /proc/net/tcp's form of an address: the 32-bit words as they lie in memory, printed as hex numbers.
std::string proc_net_addr(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        uint32_t w;
        memcpy(&w, &a->sin_addr, 4);
        return fmt::format("{:08X}:{:04X}", w, ntohs(a->sin_port));
    }
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    uint32_t w[4];
    memcpy(w, &a->sin6_addr, 16);
    return fmt::format("{:08X}{:08X}{:08X}{:08X}:{:04X}", w[0], w[1], w[2], w[3], ntohs(a->sin6_port));
}

// Where netlink is refused (a seccomp profile): the same line in /proc/net/tcp{,6}, read up to a bound.
bool proc_net_lookup(const sockaddr_storage& peer, const sockaddr_storage& local, PeerSocket& out, std::string* why) {
    FILE* f = fopen(peer.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6", "re");
    if (!f) {
        if (why) *why += std::string("; /proc/net/tcp: ") + strerror(errno);
        return false;
    }
    const std::string want_local = proc_net_addr(peer), want_remote = proc_net_addr(local);
    char line[512];
    bool found = false;
    for (int i = 0; i < 200000 && fgets(line, sizeof line, f); ++i) {
        char la[64], ra[64];
        unsigned uid = 0;
        unsigned long long inode = 0;
        if (sscanf(line, " %*d: %63s %63s %*x %*s %*s %*s %u %*d %llu", la, ra, &uid, &inode) != 4) continue;
        if (want_local == la && want_remote == ra) {
            out.uid = uid;
            out.inode = inode;
            found = inode != 0;
            break;
        }
    }
    fclose(f);
    if (!found && why) *why += "; not in /proc/net/tcp";
    return found;
}

}  // namespace

bool is_loopback(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family != AF_INET6) return false;
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

bool find_peer_socket(int fd, PeerSocket& out, std::string* why) {
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) {
        if (why) *why = std::string("getpeername: ") + strerror(errno);
        return false;
    }
    std::string w;
    bool answered = false;
    if (diag_lookup(peer, local, out, &w, &answered)) return true;
    // /proc/net/tcp (a read of every socket of the host) only where netlink itself is refused.
    if (answered || (peer.ss_family != AF_INET && peer.ss_family != AF_INET6)) {
        if (why) *why = w;
        return false;
    }
    const bool ok = proc_net_lookup(peer, local, out, &w);
    if (!ok && why) *why = w;
    return ok;
}

std::vector<int64_t> ns_pids(int64_t pid, const std::string& proc_root) {
    std::vector<int64_t> out;
    FILE* f = fopen(fmt::format("{}/{}/status", proc_root, pid).c_str(), "re");
    if (!f) return out;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "NSpid:", 6) != 0) continue;
        const char* p = line + 6;
        char* end = nullptr;
        for (;;) {
            const long long v = strtoll(p, &end, 10);
            if (end == p) break;
            out.push_back(v);
            p = end;
        }
        break;
    }
    fclose(f);
    return out;
}

bool holds_socket(int64_t pid, uint64_t inode, const std::string& proc_root, bool* denied) {
    if (pid <= 0) return false;
    const std::string dir = fmt::format("{}/{}/fd", proc_root, pid);
    Dir d(opendir(dir.c_str()));
    if (!d.d) {
        if (denied) *denied = errno == EACCES || errno == EPERM;
        return false;
    }
    int seen = 0;
    while (dirent* e = readdir(d.d)) {
        if (++seen > 1 << 20) break;
        uint64_t ino = 0;
        if (e->d_name[0] != '.' && read_fd_link(dirfd(d.d), e->d_name, &ino) && ino == inode) return true;
    }
    return false;
}

std::vector<uint64_t> socket_inodes(int64_t pid, const std::string& proc_root, int* max_fd) {
    std::vector<uint64_t> out;
    if (pid <= 0) return out;
    Dir d(opendir(fmt::format("{}/{}/fd", proc_root, pid).c_str()));
    if (!d.d) return out;
    int seen = 0;
    while (dirent* e = readdir(d.d)) {
        if (++seen > 1 << 20) break;
        if (e->d_name[0] == '.') continue;
        if (max_fd) *max_fd = std::max(*max_fd, atoi(e->d_name));
        uint64_t ino = 0;
        if (read_fd_link(dirfd(d.d), e->d_name, &ino) && ino) out.push_back(ino);
    }
    std::sort(out.begin(), out.end());
    return out;
}

PidScanBudget::Cache& PidScanBudget::cache_of(int64_t pid, uint64_t now_ns) {
    for (auto& c : caches)
        if (c.pid == pid) {
            c.used_ns = now_ns;
            return c;
        }
    if (caches.size() >= max_caches)
        caches.erase(std::min_element(caches.begin(), caches.end(),
                                      [](const Cache& a, const Cache& b) { return a.used_ns < b.used_ns; }));
    caches.push_back(Cache{});
    caches.back().pid = pid;
    caches.back().used_ns = now_ns;
    return caches.back();
}

bool PidScanBudget::take(uint64_t now_ns) {
    if (last_ns && now_ns > last_ns) tokens = std::min(burst, tokens + double(now_ns - last_ns) / 1e9 * per_second);
    last_ns = now_ns;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
}

PidProof prove_pid_of_socket(const PeerSocket& peer, int64_t claimed_pid, PidScanBudget& budget, uint64_t now_ns,
                             const std::string& proc_root, uint64_t accepted_ns) {
    PidProof p;
    p.peer_uid = peer.uid;
    p.uid_known = true;
    PidScanBudget::Cache& k = budget.cache_of(claimed_pid, now_ns);
    const auto cached = [&] { return std::binary_search(k.inodes.begin(), k.inodes.end(), peer.inode); };
    bool holds = claimed_pid > 0 && cached();
    if (claimed_pid > 0 && !holds && k.walked_ns) {
        // The descriptors just past the highest seen: where a process's newest connection usually is.
        const std::string fds = fmt::format("{}/{}/fd", proc_root, claimed_pid);
        for (int fd = k.max_fd + 1, gap = 0; fd < k.max_fd + 1 + 4096 && gap < 16; ++fd) {
            uint64_t ino = 0;
            if (!read_fd_link(AT_FDCWD, fmt::format("{}/{}", fds, fd).c_str(), &ino)) {  // no such descriptor
                ++gap;
                continue;
            }
            gap = 0;
            k.max_fd = fd;
            if (ino) {
                k.inodes.insert(std::upper_bound(k.inodes.begin(), k.inodes.end(), ino), ino);
                holds = holds || ino == peer.inode;
            }
        }
    }
    // A whole walk again only for a connection accepted after the last one, and at most a fifth of the time.
    const bool walk_allowed =
        !k.walked_ns || ((k.walked_ns <= accepted_ns || !accepted_ns) && now_ns - k.walked_ns >= 4 * k.walk_cost_ns);
    if (claimed_pid > 0 && !holds && walk_allowed) {
        const uint64_t t0 = time_base::clock_ns(CLOCK_MONOTONIC);
        k.max_fd = -1;
        k.inodes = socket_inodes(claimed_pid, proc_root, &k.max_fd);
        k.walked_ns = std::max<uint64_t>(now_ns, 1);
        k.walk_cost_ns = time_base::clock_ns(CLOCK_MONOTONIC) - t0;
        holds = cached();
    }
    // The process found is the rank's identity from here on; its gid goes with its proof (a relay forwards it).
    const auto proven = [&](int64_t pid, bool by_uid) {
        p.result = PidProof::Result::Proven;
        p.peer_pid = pid;
        p.by_uid = by_uid;
        StatusIds ids;
        if (status_ids(pid, proc_root, ids) && ids.gid_known) {
            p.peer_gid = ids.egid;
            p.gid_known = true;
        }
        return p;
    };
    if (holds) return proven(claimed_pid, false);
    // Another user's process whose descriptors may not be read here (not root): the socket's uid is the kernel's
    // word, so a claimed pid that is a process of that uid is taken on it. Nothing more can be known without
    // privilege, and that user could make any of its processes speak anyway.
    if (claimed_pid > 0 && fd_dir_denied(claimed_pid, proc_root)) {
        StatusIds ids;
        if (status_ids(claimed_pid, proc_root, ids) && (ids.ruid == peer.uid || ids.euid == peer.uid))
            return proven(claimed_pid, true);
    }
    // Not that process here: the one that is (of the socket's user), and whether it is the claimed pid in its own
    // pid namespace (a rank in a container knows itself by its pid there).
    if (!budget.take(now_ns)) {
        p.why = fmt::format(
            "cannot prove pid {} now (the socket is not that process's here, and the collector's "
            "ration of /proc walks is spent); retry later",
            claimed_pid);
        return p;
    }
    Dir d(opendir(proc_root.c_str()));
    if (!d.d) {
        p.why = fmt::format("cannot prove pid {}: cannot read {}", claimed_pid, proc_root);
        return p;
    }
    int seen = 0, denied = 0;
    while (dirent* e = readdir(d.d)) {
        if (++seen > 1 << 20 || p.peer_pid) break;
        if (!all_digits(e->d_name)) continue;
        struct stat st {};
        if (fstatat(dirfd(d.d), e->d_name, &st, 0) != 0 || st.st_uid != peer.uid) continue;
        const int64_t pid = strtoll(e->d_name, nullptr, 10);
        bool no_right = false;
        if (holds_socket(pid, peer.inode, proc_root, &no_right)) p.peer_pid = pid;
        denied += no_right;
    }
    if (!p.peer_pid) {
        p.result = PidProof::Result::Refused;
        p.why = fmt::format("claims pid {}, but no process of uid {} holds its socket", claimed_pid, peer.uid);
        if (denied)
            p.why += fmt::format(" ({} of that user's processes may not be read here: the prover runs as uid {})",
                                 denied, geteuid());
        return p;
    }
    // Only the innermost pid: an entry between (a namespace nested in another) is not what the process calls itself,
    // and a pid a process gave itself in a namespace of its own never stands for the process here (peer_pid does).
    const std::vector<int64_t> ns = ns_pids(p.peer_pid, proc_root);
    if (!ns.empty() && ns.back() == claimed_pid) return proven(p.peer_pid, false);
    p.result = PidProof::Result::Refused;
    p.why = fmt::format("claims pid {}, but its socket is held by pid {} (uid {}{})", claimed_pid, p.peer_pid, peer.uid,
                        ns.size() > 1 ? fmt::format(", pid {} in its own pid namespace", ns.back()) : std::string());
    return p;
}

PidProof prove_peer_pid(int fd, int64_t claimed_pid, PidScanBudget& budget, uint64_t now_ns,
                        const std::string& proc_root, uint64_t accepted_ns) {
    PeerSocket peer;
    std::string why;
    if (!find_peer_socket(fd, peer, &why)) {
        PidProof p;
        p.why = fmt::format("cannot find the peer's socket to prove pid {} ({})", claimed_pid, why);
        return p;
    }
    return prove_pid_of_socket(peer, claimed_pid, budget, now_ns, proc_root, accepted_ns);
}

uint64_t own_pid_namespace() {
    char target[64];
    const ssize_t n = readlink("/proc/self/ns/pid", target, sizeof target - 1);
    if (n <= 5) return 0;
    target[n] = 0;
    return strncmp(target, "pid:[", 5) == 0 ? strtoull(target + 5, nullptr, 10) : 0;
}

std::string check_rank_file(const std::string& job_dir, int64_t pid, int rank, const std::string& job_id, uint32_t uid,
                            bool check_uid) {
    Dir d(opendir(job_dir.c_str()));
    if (!d.d) return "";  // no job folder here: nothing to check against
    const std::string prefix = rank >= 0 ? fmt::format("rank{}-", rank) : "rankx-";
    // rank<R>-<host>-<pid>.ncw, or rank<R>-<host>-<pid>.<alt>.ncw where the first name was taken (the shim's
    // rank_file_writer.h); the header decides.
    const std::string mark = fmt::format("-{}.", pid);
    int seen = 0;
    std::string found_why = fmt::format("no rank file of pid {} as rank {} in {}", pid, rank, job_dir);
    // Only a folder that holds this rank's file can refute a claim: the ranks of another node (an agent of the same
    // host with a folder of its own) keep theirs elsewhere, and the first Hello may come before the file is made.
    bool rank_has_file = false;
    while (dirent* e = readdir(d.d)) {
        if (++seen > 1 << 16) break;
        const std::string name = e->d_name;
        if (name.size() < prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
            name.compare(name.size() - 4, 4, ".ncw") != 0)
            continue;
        rank_has_file = true;
        if (name.find(mark, prefix.size()) == std::string::npos) continue;
        Fd f(openat(dirfd(d.d), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
        struct stat st {};
        if (f.fd < 0 || fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (check_uid && st.st_uid != uid) {
            found_why = fmt::format("its rank file {}/{} belongs to uid {}, its socket to uid {}", job_dir, name,
                                    st.st_uid, uid);
            continue;
        }
        uint8_t head[offsetof(disk::FileHeader, job_id) + sizeof(disk::FileHeader::job_id)];
        if (pread(f.fd, head, sizeof head, 0) != ssize_t(sizeof head)) continue;
        int64_t fpid = 0;
        int32_t frank = 0;
        char fjob[sizeof(disk::FileHeader::job_id) + 1] = {};
        memcpy(&fpid, head + offsetof(disk::FileHeader, pid), sizeof fpid);
        memcpy(&frank, head + offsetof(disk::FileHeader, global_rank), sizeof frank);
        memcpy(fjob, head + offsetof(disk::FileHeader, job_id), sizeof(disk::FileHeader::job_id));
        if (memcmp(head, disk::kMagic, sizeof disk::kMagic) != 0 || fpid != pid || frank != rank || job_id != fjob) {
            found_why = fmt::format("its rank file {}/{} does not say pid {}, rank {}, job {}", job_dir, name, pid,
                                    rank, job_id);
            continue;
        }
        return "";
    }
    return rank_has_file ? found_why : "";
}

}  // namespace ncw::live

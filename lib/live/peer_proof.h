// Who is at the other end of a loopback connection, for the live collector without a token (issue 28, point 5) and
// for a node's relay, which proves its own ranks the same way and forwards what it found (issue 45, item 3): a rank's
// Hello claims a pid; this proves it. SO_PEERCRED says nothing for TCP (pid 0, uid -1), so the peer's socket is found
// by its address (sock_diag, an exact lookup; /proc/net/tcp where netlink is refused): its owner's uid, the kernel's
// word, and its inode. The claimed pid is proven when that process holds the inode (/proc/PID/fd), or, for a rank in
// another pid namespace (a container), when the process that holds it is that pid in its own namespace: the last
// entry of its NSpid line. Either way the process found (peer_pid, in the prover's namespace) is the rank's identity;
// the claim is a label. Finding that process walks /proc: rationed (PidScanBudget), so that a flood of false claims
// costs a bounded share of a core. A prover that may not read another user's descriptors (not root) proves that
// user's rank by the socket's uid alone: the claimed pid must be a process of that uid in the prover's namespace.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ncw::live {

// Whether a peer's address is this host's loopback (127/8, ::1, ::ffff:127/104): only such a peer can be proven.
bool is_loopback(const sockaddr_storage& ss);

// The socket at the far end of our connection `fd` (both ends on this host): its owner's uid and inode.
struct PeerSocket {
    uint32_t uid = 0;
    uint64_t inode = 0;
};
// false with *why when the far end is not found (not a local peer, or neither sock_diag nor /proc/net answers).
bool find_peer_socket(int fd, PeerSocket& out, std::string* why);

// The pids in the NSpid line of /proc/PID/status (this namespace's first); empty when unreadable or absent.
std::vector<int64_t> ns_pids(int64_t pid, const std::string& proc_root = "/proc");
// Whether process `pid` holds the socket `inode` (one of its descriptors); *denied: its descriptors may not be read.
bool holds_socket(int64_t pid, uint64_t inode, const std::string& proc_root = "/proc", bool* denied = nullptr);
// The socket inodes process `pid` holds, sorted (at most 1M descriptors read); its highest descriptor in *max_fd.
std::vector<uint64_t> socket_inodes(int64_t pid, const std::string& proc_root = "/proc", int* max_fd = nullptr);

// Walks of /proc, rationed: a burst, then a few a second (a walk of a host's processes costs milliseconds).
struct PidScanBudget {
    double burst = 8, per_second = 4;
    double tokens = 8;
    uint64_t last_ns = 0;
    bool take(uint64_t now_ns);
    // The sockets of the pid claimed last, from one walk of its descriptors, walked again only for a connection
    // accepted after that walk: a burst of Hellos from one process costs one walk, not one per Hello.
    // A miss first reads the descriptors past the highest seen (a new connection's usually is), then walks them all
    // again only when the last walk's cost allows it (at most a fifth of the time).
    // Per pid claimed lately (a few: floods from two processes must not walk each other's cache away).
    struct Cache {
        int64_t pid = 0;
        uint64_t walked_ns = 0, walk_cost_ns = 0, used_ns = 0;
        int max_fd = -1;
        std::vector<uint64_t> inodes;  // sorted
    };
    std::vector<Cache> caches;
    size_t max_caches = 8;
    Cache& cache_of(int64_t pid, uint64_t now_ns);
};

struct PidProof {
    enum class Result { Proven, Refused, Unproven } result = Result::Unproven;
    int64_t peer_pid = 0;   // the process found to hold the peer's socket (this namespace); 0: not found
    uint32_t peer_uid = 0;  // the socket's owner
    bool uid_known = false;
    uint32_t peer_gid = 0;  // peer_pid's effective gid (/proc/PID/status), when gid_known
    bool gid_known = false;
    // Proven by the socket's uid alone: peer_pid's descriptors may not be read here (another user's process, and
    // the prover is not root), so only its user and namespace were checked.
    bool by_uid = false;
    std::string why;  // Refused / Unproven: one line, for the log and the Reject
};

// Proves that the peer of `fd` is process `claimed_pid` (its pid in this namespace, or the last of its NSpid entries:
// its pid in its own namespace).
// Unproven (retry later) when the scan budget is spent or the peer's socket cannot be found.
// accepted_ns: when the connection was accepted (a walk of the claimed pid's descriptors before it is stale).
PidProof prove_peer_pid(int fd, int64_t claimed_pid, PidScanBudget& budget, uint64_t now_ns,
                        const std::string& proc_root = "/proc", uint64_t accepted_ns = 0);
// The same, from the peer's socket already found (find_peer_socket): for tests with a fake /proc.
PidProof prove_pid_of_socket(const PeerSocket& peer, int64_t claimed_pid, PidScanBudget& budget, uint64_t now_ns,
                             const std::string& proc_root, uint64_t accepted_ns = 0);

// The inode of this process's pid namespace (/proc/self/ns/pid), 0 when unknown: a relay says it with each proof, so
// that the collector knows whether the pids it forwards are the collector's own.
uint64_t own_pid_namespace();

// A rank file of `pid` in `job_dir` ("rank<R>-<host>-<pid>[.ALT].ncw", the shim's naming) whose header says that pid,
// global rank and job: the rank is one that job's shim made. Returns "" when it holds, else why not. A folder that
// holds no file of that rank (or does not exist) has nothing to refute the claim with: "".
std::string check_rank_file(const std::string& job_dir, int64_t pid, int rank, const std::string& job_id, uint32_t uid,
                            bool check_uid);

}  // namespace ncw::live

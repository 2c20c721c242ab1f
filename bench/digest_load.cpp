// Load generator for `ncclwatch-collector serve`: N simulated ranks on loopback, one TCP connection each, every rank
// sending a Digest once a second (staggered over the second) with one world communicator advancing in lockstep. After
// --stall-after seconds one rank (the laggard) stops issuing; the others wait in the next AllReduce. Measures the
// collector's CPU and memory (/proc/<pid>/stat and status) and the time from "stall + timeout" to the collector's
// report naming the laggard.
//
// The ranks are spread over --clients forked client processes (one epoll loop each, so that the load generator is
// not the bottleneck), and their connections over source addresses 127.0.0.2, .3, ... (--per-address each): one
// (source, destination, port) triple has fewer than 64k ephemeral ports. Every process needs a descriptor per
// connection it holds, the collector one per connection in all: the hard RLIMIT_NOFILE bounds the job that can be
// simulated. With --per-conn K, each connection is a node's relay (`ncclwatch-collector relay`, protocol 1.7)
// carrying K ranks as channels, as 16,384 nodes of 8 GPUs would reach one collector. Ranks on connections of their
// own prove a token (the collector runs with NCCLWATCH_TOKEN): without one, `serve` takes one rank a process (issue
// 45), and a client process here speaks for thousands; a relay's ranks need none (a relay of the collector's user).
//
//   digest_load --collector build/collector/ncclwatch-collector [--ranks 16384] [--stall-after 20] [--timeout 5]
//               [--cpu 1] [--client-cpus LIST] [--clients N] [--per-address 20000] [--per-conn K] [--laggard R]
//               [--op-period 0.25] [--sigs 4]
// --sigs: the signatures each digest carries (a rank's newest; protocol 1.12 sends up to 64, the ops since its last).
//
// --cpu and --client-cpus are CPU lists as taskset takes them ("1", "0-1", "2-15"); --cpu -1: not pinned.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "live/live_auth.h"
#include "ncclwatch/format.h"
#include "read/time_base.h"
#include "read/wire.h"

namespace {

using namespace ncw;

uint64_t now_ns() { return time_base::clock_ns(CLOCK_MONOTONIC); }

struct Opts {
    std::string collector;
    int ranks = 16384;
    double stall_after_s = 20;
    double timeout_s = 5;
    std::string cpu = "1";    // the collector's CPUs (taskset list); "-1": no pinning
    std::string client_cpus;  // the client processes' CPUs; "": as the parent's
    int clients = 0;          // 0: one per 16,384 ranks (or fewer when the descriptor limit says so)
    int per_address = 20000;  // connections per source address
    int per_conn = 1;         // ranks per connection: >1, each connection is a relay carrying that many
    int laggard = -1;
    double op_period_s = 0.25;  // one AllReduce every op_period_s in lockstep
    int sigs = 4;  // signatures a digest carries, the newest (protocol 1.12: up to 64, the ops since the last)
    std::string token = "digest-load";  // direct connections (per_conn 1): the collector's NCCLWATCH_TOKEN
};

struct ProcSample {
    double cpu_s = 0;
    long rss_kb = 0, hwm_kb = 0;
};

ProcSample sample(pid_t pid) {
    ProcSample s;
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(st, line);
    const auto rp = line.rfind(')');
    if (rp != std::string::npos) {
        std::istringstream in(line.substr(rp + 2));
        std::string f;
        std::vector<std::string> fields;
        while (in >> f) fields.push_back(f);
        // After ")": state is field 3, utime field 14, stime field 15 (1-based in proc(5)).
        if (fields.size() > 12)
            s.cpu_s = double(std::stoull(fields[11]) + std::stoull(fields[12])) / sysconf(_SC_CLK_TCK);
    }
    std::ifstream ss("/proc/" + std::to_string(pid) + "/status");
    while (std::getline(ss, line)) {
        if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = atol(line.c_str() + 6);
        if (line.rfind("VmHWM:", 0) == 0) s.hwm_kb = atol(line.c_str() + 6);
    }
    return s;
}

[[noreturn]] void die(const std::string& m) {
    fprintf(stderr, "digest_load: %s\n", m.c_str());
    exit(2);
}

// "0-3,8" -> the set for sched_setaffinity; false when it does not parse.
bool cpu_set_of(const std::string& list, cpu_set_t& set) {
    CPU_ZERO(&set);
    std::stringstream in(list);
    std::string part;
    bool any = false;
    while (std::getline(in, part, ',')) {
        int a = 0, b = 0;
        if (sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
        } else if (sscanf(part.c_str(), "%d", &a) == 1)
            b = a;
        else
            return false;
        for (int c = a; c <= b && c < CPU_SETSIZE; ++c) CPU_SET(c, &set), any = true;
    }
    return any;
}

CommInfo world(int rank, int nranks, uint64_t issued, uint64_t completed, uint64_t t_progress, uint64_t t_issue,
               int sigs) {
    CommInfo c;
    c.state = uint32_t(disk::CommState::Active);
    c.rank = rank;
    c.nranks = nranks;
    c.cuda_dev = rank % 8;
    c.comm_id = 0xc0ffee0000000001ull;
    c.name = "world";
    c.coll_issued = issued;
    c.coll_returned = issued;
    c.coll_reached = issued;
    c.coll_completed = completed;
    c.ops_issued = issued;
    c.ops_completed = completed;
    c.t_init_start_ns = 1;
    c.t_init_done_ns = 2;
    c.t_last_issue_ns = t_issue;
    c.t_last_progress_ns = t_progress;
    c.gpu_tracking = 1;
    for (uint64_t s = issued > uint64_t(sigs) - 1 ? issued - uint64_t(sigs) + 1 : 1; s <= issued; ++s) {
        SigInfo g;
        g.seq = s;
        g.count = 1 << 20;
        g.op = uint8_t(disk::OpType::AllReduce);
        g.dtype = 7;
        g.t_issue_ns = t_issue;
        g.tid = 1000;
        g.stream = 0x7000;
        c.recent.push_back(g);
    }
    return c;
}

// A direct connection's Hello answered: the collector's Challenge read (the socket still blocking) and the proof of
// the token over its nonce and the Hello's payload sent back (lib/live/live_auth.h).
void prove_token(int fd, const std::string& token, const std::vector<uint8_t>& hello) {
    wire::FrameReader reader;
    wire::FrameHeader h;
    std::vector<uint8_t> payload;
    std::string err;
    uint8_t b[4096];
    while (reader.next(h, payload, &err) != wire::FrameReader::Status::Frame) {
        const ssize_t n = recv(fd, b, sizeof b, 0);
        if (n <= 0) die("the collector closed a connection before its Challenge");
        reader.feed(b, size_t(n));
    }
    wire::Challenge ch;
    if (h.type != uint16_t(wire::FrameType::Challenge) || !wire::decode(payload.data(), payload.size(), ch, &err))
        die("no Challenge after a Hello (frame type " + std::to_string(h.type) + ")");
    const live::Digest32 d =
        live::token_proof(token, ch.nonce, hello.data() + wire::kHeaderBytes, hello.size() - wire::kHeaderBytes);
    wire::Proof proof;
    proof.mac.assign(d.begin(), d.end());
    std::vector<uint8_t> f;
    wire::encode(proof, f);
    if (send(fd, f.data(), f.size(), MSG_NOSIGNAL) != ssize_t(f.size())) die("proof send failed");
}

// What a client process says back at the end.
struct ClientTotals {
    uint64_t sent = 0, dropped = 0, received = 0;
};

bool read_all(int fd, void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n) {
        const ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r, n -= size_t(r);
    }
    return true;
}

void write_all(int fd, const void* p, size_t n) {
    if (write(fd, p, n) != ssize_t(n)) _exit(3);
}

// One client process: connects ranks [lo, hi) (each from its source address), says Hello, tells the parent
// (one byte on `up`), reads t0 from `down`, then sends every rank's digest once a second, staggered over the job
// (rank r at t0 + k s + r/N s), until the parent writes again on `down`; then its totals go up and it waits for
// `down` to close before it closes its connections.
[[noreturn]] void run_client(const Opts& o, int lo, int hi, int port, uint64_t start, int up, int down) {
    if (!o.client_cpus.empty()) {
        cpu_set_t set;
        if (!cpu_set_of(o.client_cpus, set) || sched_setaffinity(0, sizeof set, &set) != 0)
            die("cannot pin a client to CPUs " + o.client_cpus);
    }
    const int ep = epoll_create1(0);
    // Rank r rides connection (r - lo) / P as channel (r - lo) % P + 1 (P = 1: its own connection, unwrapped).
    const int P = o.per_conn;
    const size_t nconn = size_t((hi - lo + P - 1) / P);
    std::vector<int> fds(nconn, -1);
    std::vector<std::vector<uint8_t>> pending(nconn);  // what a connection's socket did not take yet
    std::vector<uint8_t> wrapped;
    // One rank's frame onto its connection, wrapped for a relay when K > 1.
    auto frame_for = [&](int r, const std::vector<uint8_t>& frame) -> const std::vector<uint8_t>& {
        if (P == 1) return frame;
        wrapped.clear();
        wire::encode_relay(uint32_t((r - lo) % P + 1), frame.data(), frame.size(), wrapped);
        return wrapped;
    };
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const uint64_t boot = 0x5eedb007ull;  // not this boot: the collector estimates offsets as for a remote host
    std::vector<uint8_t> buf;
    for (int r = lo; r < hi; ++r) {
        const size_t conn = size_t((r - lo) / P);
        if ((r - lo) % P == 0) {
            const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) die(std::string("socket: ") + strerror(errno));
            // Source 127.0.0.2 + (connection / per_address), its port picked at connect (per destination).
            int one = 1;
            setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
            sockaddr_in src{};
            src.sin_family = AF_INET;
            src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + uint32_t(r / P / o.per_address));
            if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0)
                die("bind rank " + std::to_string(r) + ": " + strerror(errno));
            if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
                die("connect rank " + std::to_string(r) + ": " + strerror(errno));
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            fds[conn] = fd;
        }
        const int fd = fds[conn];
        wire::Hello h;
        h.header.major = disk::kFormatMajor;
        h.header.minor = disk::kFormatMinor;
        // The process that holds the socket: without a token, `serve` proves a loopback Hello's pid (issue 28).
        h.header.pid = getpid();
        h.header.global_rank = r;
        h.header.local_rank = r % 8;
        h.header.world_size = o.ranks;
        h.header.local_world_size = 8;
        h.header.host = "sim-node-" + std::to_string(r / 8);
        h.header.job_id = "digest-load";
        h.header.start_mono_ns = start;
        h.header.boot_id_hash = boot;
        h.header.heartbeat_mono_ns = now_ns();
        h.header.process_state = uint32_t(disk::ProcessState::Running);
        h.header.nccl_version = 22809;
        h.file = "/tmp/ncclwatch/digest-load/rank" + std::to_string(r) + ".ncw";
        buf.clear();
        wire::encode(h, buf);
        const auto& f = frame_for(r, buf);
        if (send(fd, f.data(), f.size(), MSG_NOSIGNAL) != ssize_t(f.size())) die("hello send failed");
        if (P == 1) prove_token(fd, o.token, buf);
        if ((r - lo) % P == P - 1 || r == hi - 1) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u32 = uint32_t(conn);
            epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        }
    }
    const char ok = 1;
    write_all(up, &ok, 1);
    uint64_t t0 = 0;
    if (!read_all(down, &t0, sizeof t0)) _exit(0);
    {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = UINT32_MAX;
        epoll_ctl(ep, EPOLL_CTL_ADD, down, &ev);
    }

    // Lockstep: at t (since t0) every rank has completed floor(t/op) AllReduces and issued the next. At the stall
    // (S = t0 + K*op) the laggard stops after completing #K; the others issue #K+1 and wait in it.
    const uint64_t op_ns = uint64_t(o.op_period_s * 1e9);
    const uint64_t K = uint64_t(o.stall_after_s / o.op_period_s);
    const uint64_t S = t0 + K * op_ns;
    ClientTotals tot;
    uint64_t second = 0;
    size_t cursor = size_t(lo);
    std::vector<epoll_event> evs(1024);
    static uint8_t sink[65536];
    bool stop = false;
    while (!stop) {
        const uint64_t el = now_ns() - t0;
        const uint64_t sec = el / 1000000000ull;
        const size_t due =
            std::clamp(size_t((el % 1000000000ull) * uint64_t(o.ranks) / 1000000000ull), size_t(lo), size_t(hi));
        auto send_rank = [&](size_t r) {
            const uint64_t now = now_ns();
            uint64_t n = (now - t0) / op_ns;  // completed
            uint64_t issued = n + 1, completed = n, progress = t0 + n * op_ns;
            if (now >= S) {
                if (int(r) == o.laggard)
                    issued = K, completed = K, progress = S;
                else
                    issued = K + 1, completed = K, progress = S;
            }
            wire::Digest d;
            d.sent_mono_ns = now;
            d.process_state = uint32_t(disk::ProcessState::Running);
            d.comms.push_back(world(int(r), o.ranks, issued, completed, progress, progress, o.sigs));
            buf.clear();
            wire::encode(d, buf);
            const size_t conn = (r - size_t(lo)) / size_t(P);
            auto& q = pending[conn];
            if (!q.empty()) {  // the rest of an earlier frame first; this one is dropped if it still does not fit
                const ssize_t w = send(fds[conn], q.data(), q.size(), MSG_NOSIGNAL);
                if (w > 0) q.erase(q.begin(), q.begin() + w);
                if (!q.empty()) {
                    ++tot.dropped;  // the collector's socket buffer is full: it is not keeping up
                    return;
                }
            }
            const auto& f = frame_for(int(r), buf);
            const ssize_t w = send(fds[conn], f.data(), f.size(), MSG_NOSIGNAL);
            if (w == ssize_t(f.size())) {
                ++tot.sent;
            } else if (w <= 0) {
                ++tot.dropped;
            } else {
                ++tot.sent;
                q.assign(f.begin() + w, f.end());
            }
        };
        if (sec != second) {
            for (; cursor < size_t(hi); ++cursor) send_rank(cursor);
            cursor = size_t(lo);
            second = sec;
        }
        for (; cursor < due; ++cursor) send_rank(cursor);

        // Drain HelloAcks and DumpRequests; the parent's word ends the loop.
        const int n = epoll_wait(ep, evs.data(), int(evs.size()), 1);
        for (int i = 0; i < n; ++i) {
            const uint32_t k = evs[size_t(i)].data.u32;
            if (k == UINT32_MAX) {
                stop = true;
                continue;
            }
            const ssize_t r = recv(fds[k], sink, sizeof sink, 0);
            if (r > 0) tot.received += uint64_t(r);
        }
    }
    uint64_t word;
    if (!read_all(down, &word, sizeof word)) _exit(0);
    write_all(up, &tot, sizeof tot);
    char c;
    while (read(down, &c, 1) > 0) {
    }
    for (int fd : fds) close(fd);
    _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--collector")
            o.collector = next();
        else if (a == "--ranks")
            o.ranks = atoi(next().c_str());
        else if (a == "--stall-after")
            o.stall_after_s = atof(next().c_str());
        else if (a == "--timeout")
            o.timeout_s = atof(next().c_str());
        else if (a == "--cpu")
            o.cpu = next();
        else if (a == "--client-cpus")
            o.client_cpus = next();
        else if (a == "--clients")
            o.clients = atoi(next().c_str());
        else if (a == "--per-conn")
            o.per_conn = atoi(next().c_str());
        else if (a == "--per-address")
            o.per_address = atoi(next().c_str());
        else if (a == "--laggard")
            o.laggard = atoi(next().c_str());
        else if (a == "--op-period")
            o.op_period_s = atof(next().c_str());
        else if (a == "--sigs")
            o.sigs = atoi(next().c_str());
        else
            die("unknown argument " + a);
    }
    if (o.collector.empty() || o.ranks < 2) die("usage: digest_load --collector PATH [--ranks N] ...");
    if (o.per_address < 1 || o.per_address > 28000) die("--per-address must be 1..28000 (the ephemeral ports)");
    if (o.per_conn < 1 || o.per_conn > 4096) die("--per-conn must be 1..4096 (a relay's channels)");
    if (o.sigs < 1 || o.sigs > int(wire::kMaxDigestSigs + wire::kMaxDigestEarlierSigs))
        die("--sigs must be 1..64 (what a digest carries)");
    const int conns = (o.ranks + o.per_conn - 1) / o.per_conn;
    if ((conns - 1) / o.per_address + 2 > 254) die("too many source addresses (raise --per-address)");
    if (o.laggard < 0) o.laggard = o.ranks * 7 / 13;
    signal(SIGPIPE, SIG_IGN);

    // Every process needs a descriptor per connection it holds: the collector all of them, a client its share.
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < rlim_t(conns) + 64)
        die("RLIMIT_NOFILE hard limit " + std::to_string(rl.rlim_max) + " is too low: the collector needs one " +
            "descriptor per connection (" + std::to_string(conns) +
            " + 64); raising it needs CAP_SYS_RESOURCE, or carry several ranks per connection (--per-conn)");
    const int per_client_max = int(std::min<rlim_t>(16384, rl.rlim_cur - 64));
    if (o.clients <= 0) o.clients = (conns + per_client_max - 1) / per_client_max;
    if ((conns + o.clients - 1) / o.clients > int(rl.rlim_cur) - 64) die("too few --clients for the fd limit");

    char tmpl[] = "/tmp/ncw-digest-load-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp failed");
    const std::string out_dir = tmpl;

    // The collector, pinned, its stdout on a pipe to learn its port. Its bounds fit the job (the defaults hold
    // 262,144 ranks; an older collector's 65,536).
    int pfd[2];
    if (pipe(pfd) != 0) die("pipe failed");
    char timeout_arg[32];
    snprintf(timeout_arg, sizeof timeout_arg, "%g", o.timeout_s);
    // A relay's channels count as connections at the collector, beside the relay's own.
    const std::string bound = std::to_string(std::max(65536, o.ranks + 1024));
    const std::string conn_bound = std::to_string(std::max(65536, o.ranks + conns + 1024));
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        if (o.per_conn == 1) setenv("NCCLWATCH_TOKEN", o.token.c_str(), 1);
        std::vector<std::string> args;
        if (o.cpu != "-1") args = {"taskset", "-c", o.cpu};
        for (const char* s : std::initializer_list<const char*>{
                 o.collector.c_str(), "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--timeout",
                 timeout_arg, "--dead-after", "30", "--out", out_dir.c_str(), "--quiet", "--max-ranks", bound.c_str(),
                 "--max-connections", conn_bound.c_str()})
            args.push_back(s);
        std::vector<char*> av;
        for (auto& s : args) av.push_back(s.data());
        av.push_back(nullptr);
        execvp(av[0], av.data());
        _exit(127);
    }
    close(pfd[1]);
    FILE* cout_ = fdopen(pfd[0], "r");
    char line[512] = {};
    if (!fgets(line, sizeof line, cout_)) die("the collector did not start");
    int port = 0, mport = 0;
    if (const char* p = strstr(line, "127.0.0.1:")) port = atoi(p + 10);
    if (const char* p = strstr(line, "http://127.0.0.1:")) mport = atoi(p + 17);
    if (!port) die(std::string("no port in the collector's first line: ") + line);
    printf(
        "collector pid %d on port %d (metrics %d), %s, %d ranks on %d connection(s) (%d per connection) in %d "
        "client process(es)%s, %d source address(es), laggard %d, timeout %g s\n",
        pid, port, mport, o.cpu != "-1" ? ("pinned to CPU " + o.cpu).c_str() : "not pinned", o.ranks, conns, o.per_conn,
        o.clients, o.client_cpus.empty() ? "" : (" on CPU " + o.client_cpus).c_str(), (conns - 1) / o.per_address + 1,
        o.laggard, o.timeout_s);
    fflush(stdout);

    // The clients connect every rank in parallel and say Hello.
    const uint64_t t_conn = now_ns();
    const uint64_t start = t_conn;
    struct Client {
        pid_t pid;
        int up, down;
    };
    std::vector<Client> clients;
    for (int k = 0; k < o.clients; ++k) {
        // Whole connections per client, so that a relay's ranks stay together.
        const int lo = int(int64_t(conns) * k / o.clients) * o.per_conn,
                  hi = std::min(o.ranks, int(int64_t(conns) * (k + 1) / o.clients) * o.per_conn);
        int up[2], down[2];
        if (pipe(up) != 0 || pipe(down) != 0) die("pipe failed");
        const pid_t c = fork();
        if (c < 0) die("fork failed");
        if (c == 0) {
            close(up[0]);
            close(down[1]);
            fclose(cout_);
            for (const auto& other : clients) close(other.up), close(other.down);
            run_client(o, lo, hi, port, start, up[1], down[0]);
        }
        close(up[1]);
        close(down[0]);
        clients.push_back({c, up[0], down[1]});
    }
    for (const auto& c : clients) {
        char ok = 0;
        if (!read_all(c.up, &ok, 1)) die("a client failed to connect its ranks");
    }
    printf("connected %d ranks in %.2f s\n", o.ranks, double(now_ns() - t_conn) / 1e9);
    fflush(stdout);

    const uint64_t op_ns = uint64_t(o.op_period_s * 1e9);
    const uint64_t t0 = now_ns();
    for (const auto& c : clients) write_all(c.down, &t0, sizeof t0);
    const uint64_t K = uint64_t(o.stall_after_s / o.op_period_s);
    const uint64_t S = t0 + K * op_ns;
    const uint64_t deadline = S + uint64_t((o.timeout_s + 10) * 1e9);
    const std::string report = out_dir + "/digest-load/live-report.txt";

    ProcSample steady0{}, steady1{};
    uint64_t t_steady0 = 0, t_steady1 = 0;
    double detected_at = 0;
    bool detected = false;
    std::string named;
    uint64_t other_reports = 0;
    long long last_mtime = 0;
    for (;;) {
        const uint64_t t = now_ns();
        if (t > deadline) break;
        if (!t_steady0 && t >= t0 + 3'000'000'000ull) t_steady0 = t, steady0 = sample(pid);
        if (!t_steady1 && t >= S) t_steady1 = t, steady1 = sample(pid);
        // Detection: the first report (after the stall) whose top verdict names the laggard.
        struct stat stt {};
        if (t >= S && stat(report.c_str(), &stt) == 0 &&
            stt.st_mtim.tv_nsec + stt.st_mtim.tv_sec * 1000000000ll != last_mtime) {
            last_mtime = stt.st_mtim.tv_nsec + stt.st_mtim.tv_sec * 1000000000ll;
            // The text report is written first and is small (its table is capped): its first verdict line.
            std::ifstream in(report);
            std::string head, first;
            std::getline(in, head);
            std::getline(in, first);
            const std::string who = "rank " + std::to_string(o.laggard) + " ";
            if (first.find(who) != std::string::npos) {
                detected = true;
                detected_at = double(int64_t(now_ns() - S)) / 1e9 - o.timeout_s;
                named = first.substr(0, first.find(':')) + " culprits [" + std::to_string(o.laggard) + "]";
                break;
            }
            ++other_reports;
            if (other_reports <= 3) printf("(report not about the laggard: %s)\n", first.substr(0, 200).c_str());
        }
        usleep(5000);
    }
    const ProcSample end = sample(pid);
    ClientTotals tot;
    for (const auto& c : clients) write_all(c.down, &t0, sizeof t0);  // stop sending
    for (const auto& c : clients) {
        ClientTotals t;
        if (read_all(c.up, &t, sizeof t)) tot.sent += t.sent, tot.dropped += t.dropped, tot.received += t.received;
    }
    const double steady_cpu =
        t_steady1 > t_steady0 ? (steady1.cpu_s - steady0.cpu_s) / (double(t_steady1 - t_steady0) / 1e9) : 0;
    printf("steady state (%.1f s, %d digests/s): collector CPU %.1f%% of one core; RSS %.1f MiB, peak %.1f MiB\n",
           double(t_steady1 - t_steady0) / 1e9, o.ranks, 100 * steady_cpu, double(steady1.rss_kb) / 1024,
           double(end.hwm_kb) / 1024);
    printf("digests sent %llu, dropped (socket full) %llu, bytes back %llu\n", (unsigned long long)tot.sent,
           (unsigned long long)tot.dropped, (unsigned long long)tot.received);
    if (!detected)
        printf("NO REPORT naming the laggard within 10 s after the stall + timeout (%llu other reports)\n",
               (unsigned long long)other_reports);
    else
        printf("report %.3f s after stall + timeout (%.3f s after the stall): %s (laggard %d)\n", detected_at,
               detected_at + o.timeout_s, named.c_str(), o.laggard);

    // One scrape, for its size and duration.
    if (mport) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in ma{};
        ma.sin_family = AF_INET;
        ma.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ma.sin_port = htons(uint16_t(mport));
        const uint64_t ts = now_ns();
        size_t bytes = 0;
        std::string body;
        static uint8_t sink[65536];
        if (connect(fd, reinterpret_cast<sockaddr*>(&ma), sizeof ma) == 0) {
            const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
            if (send(fd, req, sizeof req - 1, 0) > 0) {
                ssize_t r;
                while ((r = recv(fd, sink, sizeof sink, 0)) > 0) {
                    bytes += size_t(r);
                    if (body.size() < (64u << 20)) body.append(reinterpret_cast<char*>(sink), size_t(r));
                }
            }
        }
        close(fd);
        auto metric = [&](const std::string& name) -> std::string {
            const auto p = body.find("\n" + name + " ");
            if (p == std::string::npos) return "?";
            const size_t b = p + name.size() + 2;
            return body.substr(b, body.find('\n', b) - b);
        };
        printf(
            "/metrics: %.1f MiB in %.3f s; collector frames_total %s (sent %llu digests + %d hellos), analyses %s, "
            "last analysis %s s\n",
            double(bytes) / (1 << 20), double(now_ns() - ts) / 1e9, metric("ncclwatch_collector_frames_total").c_str(),
            (unsigned long long)tot.sent, o.ranks, metric("ncclwatch_collector_analyses_total").c_str(),
            metric("ncclwatch_collector_last_analysis_seconds").c_str());
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    for (const auto& c : clients) {
        close(c.down);
        close(c.up);
        waitpid(c.pid, &status, 0);
    }
    std::string rm = "rm -rf " + out_dir;
    if (system(rm.c_str()) != 0) {
    }
    return named.find("culprits [" + std::to_string(o.laggard) + "]") != std::string::npos ? 0 : 1;
}

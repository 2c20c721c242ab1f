// Load generator for `ncclwatch-collector serve`: N simulated ranks on loopback, one TCP connection each, every rank
// sending a Digest once a second (staggered over the second) with one world communicator advancing in lockstep. After
// --stall-after seconds one rank (the laggard) stops issuing; the others wait in the next AllReduce. Measures the
// collector's CPU and memory (/proc/<pid>/stat and status) and the time from "stall + timeout" to the collector's
// report naming the laggard.
//
//   digest_load --collector build/collector/ncclwatch-collector [--ranks 16384] [--stall-after 20] [--timeout 5]
//               [--cpu 1] [--laggard R]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

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
    int cpu = 1;  // -1: no pinning
    int laggard = -1;
    double op_period_s = 0.25;  // one AllReduce every op_period_s in lockstep
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

CommInfo world(int rank, int nranks, uint64_t issued, uint64_t completed, uint64_t t_progress, uint64_t t_issue) {
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
    for (uint64_t s = issued > 3 ? issued - 3 : 1; s <= issued; ++s) {
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
            o.cpu = atoi(next().c_str());
        else if (a == "--laggard")
            o.laggard = atoi(next().c_str());
        else if (a == "--op-period")
            o.op_period_s = atof(next().c_str());
        else
            die("unknown argument " + a);
    }
    if (o.collector.empty() || o.ranks < 2) die("usage: digest_load --collector PATH [--ranks N] ...");
    if (o.laggard < 0) o.laggard = o.ranks * 7 / 13;
    signal(SIGPIPE, SIG_IGN);

    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < rlim_t(o.ranks) + 64)
        die("RLIMIT_NOFILE hard limit " + std::to_string(rl.rlim_max) + " is too low");

    char tmpl[] = "/tmp/ncw-digest-load-XXXXXX";
    if (!mkdtemp(tmpl)) die("mkdtemp failed");
    const std::string out_dir = tmpl;

    // The collector, pinned to one core, its stdout on a pipe to learn its port.
    int pfd[2];
    if (pipe(pfd) != 0) die("pipe failed");
    char timeout_arg[32];
    snprintf(timeout_arg, sizeof timeout_arg, "%g", o.timeout_s);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        std::vector<std::string> args;
        if (o.cpu >= 0) args = {"taskset", "-c", std::to_string(o.cpu)};
        for (const char* s : std::initializer_list<const char*>{
                 o.collector.c_str(), "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--timeout",
                 timeout_arg, "--dead-after", "30", "--out", out_dir.c_str(), "--quiet"})
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
    printf("collector pid %d on port %d (metrics %d), %s, %d ranks, laggard %d, timeout %g s\n", pid, port, mport,
           o.cpu >= 0 ? ("pinned to CPU " + std::to_string(o.cpu)).c_str() : "not pinned", o.ranks, o.laggard,
           o.timeout_s);

    // Connect every rank and say Hello.
    const uint64_t t_conn = now_ns();
    const int ep = epoll_create1(0);
    std::vector<int> fds(size_t(o.ranks), -1);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const uint64_t boot = 0x5eedb007ull;  // not this boot: the collector estimates offsets as for a remote host
    const uint64_t start = now_ns();
    std::vector<uint8_t> buf;
    for (int r = 0; r < o.ranks; ++r) {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) die(std::string("socket: ") + strerror(errno));
        if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
            die("connect rank " + std::to_string(r) + ": " + strerror(errno));
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        wire::Hello h;
        h.header.major = disk::kFormatMajor;
        h.header.minor = disk::kFormatMinor;
        h.header.pid = 100000 + r;
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
        if (send(fd, buf.data(), buf.size(), MSG_NOSIGNAL) != ssize_t(buf.size())) die("hello send failed");
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u32 = uint32_t(r);
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        fds[size_t(r)] = fd;
    }
    printf("connected %d ranks in %.2f s\n", o.ranks, double(now_ns() - t_conn) / 1e9);
    fflush(stdout);

    // Lockstep: at t (since t0) every rank has completed floor(t/op) AllReduces and issued the next. At the stall
    // (S = t0 + K*op) the laggard stops after completing #K; the others issue #K+1 and wait in it.
    const uint64_t op_ns = uint64_t(o.op_period_s * 1e9);
    const uint64_t t0 = now_ns();
    const uint64_t K = uint64_t(o.stall_after_s / o.op_period_s);
    const uint64_t S = t0 + K * op_ns;
    const uint64_t deadline = S + uint64_t((o.timeout_s + 10) * 1e9);
    const std::string report = out_dir + "/digest-load/live-report.txt";

    uint64_t sent = 0, dropped = 0, received_bytes = 0, second = 0;
    size_t cursor = 0;
    ProcSample steady0{}, steady1{};
    uint64_t t_steady0 = 0, t_steady1 = 0;
    double detected_at = 0;
    bool detected = false;
    std::string named;
    uint64_t last_check = 0, other_reports = 0;
    long long last_mtime = 0;
    std::vector<epoll_event> evs(1024);
    uint8_t sink[65536];
    for (;;) {
        const uint64_t t = now_ns();
        if (t > deadline) break;
        // Digests due: rank r sends at t0 + k s + r/N s.
        const uint64_t el = t - t0;
        const uint64_t sec = el / 1000000000ull;
        const size_t due = size_t((el % 1000000000ull) * uint64_t(o.ranks) / 1000000000ull);
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
            d.comms.push_back(world(int(r), o.ranks, issued, completed, progress, progress));
            buf.clear();
            wire::encode(d, buf);
            const ssize_t w = send(fds[r], buf.data(), buf.size(), MSG_NOSIGNAL);
            if (w == ssize_t(buf.size()))
                ++sent;
            else if (w <= 0)
                ++dropped;  // the collector's socket buffer is full: it is not keeping up
            else
                die("partial send (collector far behind)");
        };
        if (sec != second) {
            for (; cursor < size_t(o.ranks); ++cursor) send_rank(cursor);
            cursor = 0;
            second = sec;
        }
        for (; cursor < due; ++cursor) send_rank(cursor);

        // Drain HelloAcks and DumpRequests.
        const int n = epoll_wait(ep, evs.data(), int(evs.size()), 1);
        for (int i = 0; i < n; ++i) {
            const ssize_t r = recv(fds[evs[size_t(i)].data.u32], sink, sizeof sink, 0);
            if (r > 0) received_bytes += uint64_t(r);
        }

        if (!t_steady0 && t >= t0 + 3'000'000'000ull) t_steady0 = t, steady0 = sample(pid);
        if (!t_steady1 && t >= S) t_steady1 = t, steady1 = sample(pid);
        // Detection: the first report (after the stall) whose top verdict names the laggard.
        if (t >= S && !detected && t - last_check > 20'000'000) {
            last_check = t;
            struct stat stt {};
            if (stat(report.c_str(), &stt) == 0 &&
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
        }
    }
    const ProcSample end = sample(pid);
    const double steady_cpu =
        t_steady1 > t_steady0 ? (steady1.cpu_s - steady0.cpu_s) / (double(t_steady1 - t_steady0) / 1e9) : 0;
    printf("steady state (%.1f s, %d digests/s): collector CPU %.1f%% of one core; RSS %.1f MiB, peak %.1f MiB\n",
           double(t_steady1 - t_steady0) / 1e9, o.ranks, 100 * steady_cpu, double(steady1.rss_kb) / 1024,
           double(end.hwm_kb) / 1024);
    printf("digests sent %llu, dropped (socket full) %llu, bytes back %llu\n", (unsigned long long)sent,
           (unsigned long long)dropped, (unsigned long long)received_bytes);
    if (!detected)
        printf("NO REPORT naming the laggard within 10 s after the stall + timeout (%llu other reports)\n",
               (unsigned long long)other_reports);
    else
        printf("report %.3f s after stall + timeout (%.3f s after the stall): %s (laggard %d)\n", detected_at,
               detected_at + o.timeout_s, named.c_str(), o.laggard);

    // One scrape, for its size and duration.
    if (mport) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in ma = sa;
        ma.sin_port = htons(uint16_t(mport));
        const uint64_t ts = now_ns();
        size_t bytes = 0;
        std::string body;
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
            (unsigned long long)sent, o.ranks, metric("ncclwatch_collector_analyses_total").c_str(),
            metric("ncclwatch_collector_last_analysis_seconds").c_str());
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    for (int fd : fds) close(fd);
    std::string rm = "rm -rf " + out_dir;
    if (system(rm.c_str()) != 0) {
    }
    return named.find("culprits [" + std::to_string(o.laggard) + "]") != std::string::npos ? 0 : 1;
}

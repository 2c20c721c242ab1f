// `ncclwatch-collector serve`: the live collector (live_server.h) in the foreground until SIGINT/SIGTERM.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.h"
#include "live/live_server.h"

namespace ncw::cli {

namespace {

bool parse_seconds(const std::string& s, double& out) {
    char* end = nullptr;
    errno = 0;
    const double v = strtod(s.c_str(), &end);
    if (s.empty() || errno || *end || !std::isfinite(v) || v < 0 || v > 1e7) return false;
    out = v;
    return true;
}

// A count or a size: digits, optionally K, M or G (binary multiples).
bool parse_count(const std::string& s, size_t& out) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = strtoull(s.c_str(), &end, 10);
    if (s.empty() || !isdigit((unsigned char)s[0]) || errno) return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, ++end;
    else if (*end == 'M')
        shift = 20, ++end;
    else if (*end == 'G')
        shift = 30, ++end;
    if (*end || v > (1ull << 40) >> shift) return false;
    out = size_t(v << shift);
    return true;
}

// One connection per rank: 16,384 ranks need more descriptors than the usual soft limit of 1024.
void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

// HOST of HOST:PORT names only this machine: 127.0.0.0/8, ::1 (also v4-mapped), "localhost". A name that needs
// resolving, "*" or 0.0.0.0 is not loopback.
bool loopback(const std::string& listen) {
    std::string host = listen.substr(0, listen.rfind(':'));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "localhost") return true;
    in_addr a4{};
    if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    in6_addr a6{};
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
    live::ServerOptions opt;
    bool once = false, insecure = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&](const char* what) -> const std::string* {
            if (i + 1 >= args.size()) {
                fmt::print(stderr, "{}: serve: {} needs {}\n", kProg, a, what);
                return nullptr;
            }
            return &args[++i];
        };
        if (a == "--listen" || a == "--metrics" || a == "--out") {
            const std::string* v = value(a == "--out" ? "DIR" : "HOST:PORT");
            if (!v) return 2;
            (a == "--listen" ? opt.listen : a == "--metrics" ? opt.metrics_listen : opt.out_dir) = *v;
        } else if (double* sec = a == "--timeout"          ? &opt.timeout_s
                                 : a == "--dead-after"     ? &opt.dead_after_s
                                 : a == "--analyze-period" ? &opt.analyze_period_s
                                 : a == "--retention"      ? &opt.retention_s
                                 : a == "--hello-timeout"  ? &opt.hello_timeout_s
                                 : a == "--frame-timeout"  ? &opt.frame_timeout_s
                                 : a == "--scrape-timeout" ? &opt.scrape_timeout_s
                                                           : nullptr) {
            const std::string* v = value("SEC");
            if (!v) return 2;
            if (!parse_seconds(*v, *sec)) {
                fmt::print(stderr, "{}: serve: {} '{}' is not a number of seconds\n", kProg, a, clean(*v));
                return 2;
            }
        } else if (size_t* n = a == "--max-connections"     ? &opt.max_connections
                               : a == "--max-ranks"         ? &opt.max_ranks
                               : a == "--max-jobs"          ? &opt.max_jobs
                               : a == "--max-conn-buffer"   ? &opt.max_conn_buffer
                               : a == "--buffer-budget"     ? &opt.max_buffered_total
                               : a == "--metrics-max-bytes" ? &opt.metrics_max_bytes
                               : a == "--metrics-budget"    ? &opt.metrics_queue_max
                                                            : nullptr) {
            const std::string* v = value("N");
            if (!v) return 2;
            if (!parse_count(*v, *n)) {
                fmt::print(stderr, "{}: serve: {} '{}' is not a count (digits, optionally K, M or G)\n", kProg, a,
                           clean(*v));
                return 2;
            }
        } else if (a == "--help" || a == "-h") {
            fmt::print("{}", kUsage);
            return 0;
        } else if (a == "--once") {
            once = true;
        } else if (a == "--quiet") {
            opt.quiet = true;
        } else if (a == "--no-dumps") {
            opt.request_dumps = false;
        } else if (a == "--insecure") {
            insecure = true;
        } else if (a == "--metrics-ids") {
            opt.metrics_ids = true;
        } else {
            fmt::print(stderr, "{}: serve: unknown argument '{}'\n\n{}", kProg, clean(a), kUsage);
            return 2;
        }
    }
    if (const char* t = getenv("NCCLWATCH_TOKEN")) opt.token = t;
    // Without a token anyone who can reach the port can claim to be a rank: only this machine, unless told.
    if (opt.token.empty() && !insecure && !loopback(opt.listen)) {
        fmt::print(stderr,
                   "{}: serve: refusing to listen on {} without a token: any host that reaches it could speak for a "
                   "rank. Set NCCLWATCH_TOKEN (here and on the ranks), listen on a loopback address, or pass "
                   "--insecure\n",
                   kProg, clean(opt.listen));
        return 2;
    }
    raise_fd_limit();

    // The server thread inherits this mask, so only sigtimedwait below sees SIGINT/SIGTERM.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    live::LiveServer server(opt);
    std::string err;
    if (!server.start(&err)) {
        fmt::print(stderr, "{}: serve: {}\n", kProg, err);
        return 2;
    }
    const auto st = server.stats();
    std::string host = opt.listen.substr(0, opt.listen.rfind(':'));
    fmt::print("{}: listening on {}:{}", kProg, host, st.port);
    if (!opt.metrics_listen.empty())
        fmt::print(", metrics on http://{}:{}/metrics", opt.metrics_listen.substr(0, opt.metrics_listen.rfind(':')),
                   st.metrics_port);
    fmt::print(" (timeout {} s, dead after {} s{})\n", opt.timeout_s, opt.dead_after_s,
               opt.token.empty() ? "" : ", token required");
    fflush(stdout);

    const timespec tick{0, 100'000'000};
    for (;;) {
        const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            fmt::print(stderr, "{}: serve: stopping ({})\n", kProg, sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
        if (once && server.stats().reports > 0) break;
    }
    server.stop();
    return server.stats().reports > 0 ? 1 : 0;
}

}  // namespace ncw::cli

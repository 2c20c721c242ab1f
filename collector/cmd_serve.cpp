// `ncclwatch-collector serve`: the live collector (live_server.h) in the foreground until SIGINT/SIGTERM.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "live/live_server.h"
#include "read/safe_write.h"

namespace ncw::cli {

namespace {

// One connection per rank: 16,384 ranks need more descriptors than the usual soft limit of 1024.
void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

// The reports go into OUT/<job>/: where others can write to OUT without the sticky bit, or another user owns it, they
// can replace or remove them. Said once, at the start; the collector runs on (the folder is the operator's choice).
void warn_report_folder(const std::string& out_dir) {
    if (out_dir.empty()) return;
    const int fd = open(out_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;  // not there yet: made 0750 at the first report (read/safe_write.h)
    const std::string risk = files::folder_risk(fd, out_dir);
    close(fd);
    if (!risk.empty())
        fmt::print(stderr,
                   "{}: serve: warning: the report folder is not yours alone: {}. Whoever can write there can "
                   "replace or remove the live reports\n",
                   kProg, clean(risk));
}

// Every read hands its connection's frame buffer back (16,384 connections holding 64 KiB each would be a GiB), and
// every digest replaces a rank's snapshot: at 100,000 frames a second, glibc returning the heap's top to the kernel
// and taking it back (brk, page faults) was a third of the collector's time. Keep what was freed, for the next frame.
void keep_heap() {
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

// HOST of HOST:PORT names only this machine: 127.0.0.0/8, ::1 (also v4-mapped), "localhost". A name that needs
// resolving, "*" or 0.0.0.0 is not loopback, nor is an address the parser refuses.
bool loopback(const std::string& listen) {
    Endpoint ep;
    if (!parse_endpoint(listen, ep, nullptr, EndpointKind::Listen)) return false;
    const std::string& host = ep.host;
    if (host == "localhost") return true;
    in_addr a4{};
    if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    in6_addr a6{};
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

// A uid of --allow-uid: digits, below (uid_t)-1, which is no user.
bool parse_uid(const std::string& s, uint32_t& out) {
    size_t v = 0;
    if (!parse_count(s, v, false) || v >= 0xffffffffu) return false;
    out = uint32_t(v);
    return true;
}

// A user of --allow-user: a name this host knows (looked up once, at start).
bool uid_of_user(const std::string& name, uint32_t& out) {
    if (name.empty()) return false;
    std::vector<char> buf(16384);
    passwd pw{}, *found = nullptr;
    if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) return false;
    out = uint32_t(pw.pw_uid);
    return true;
}

struct ServeArgs {
    live::ServerOptions opt;
    bool once = false, insecure = false;
};

int run_serve(ServeArgs& args) {
    live::ServerOptions& opt = args.opt;
    const bool once = args.once, insecure = args.insecure;
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
    // Without a token a loopback Hello proves the pid it claims (a relay's ranks by their relay's proof), and only
    // our own user's ranks are taken, and those of the users --allow-uid / --allow-user name.
    opt.prove_peers = opt.token.empty();
    opt.own_uid_only = opt.token.empty();
    opt.allow_option = "--allow-uid";
    if (!opt.token.empty() && !opt.allowed_uids.empty())
        fmt::print(stderr,
                   "{}: serve: note: --allow-uid and --allow-user change nothing with NCCLWATCH_TOKEN set: every "
                   "rank proves the token, whatever its user\n",
                   kProg);
    raise_fd_limit();
    keep_heap();

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
    warn_report_folder(opt.out_dir);
    const auto st = server.stats();
    std::string host = opt.listen.substr(0, opt.listen.rfind(':'));
    fmt::print("{}: listening on {}:{}", kProg, host, st.port);
    if (!opt.metrics_listen.empty())
        fmt::print(", metrics on http://{}:{}/metrics", opt.metrics_listen.substr(0, opt.metrics_listen.rfind(':')),
                   st.metrics_port);
    fmt::print(" (timeout {}, dead after {} s{})\n",
               opt.timeout_from_ranks ? fmt::format("each job's own, {} s until its ranks say", opt.timeout_s)
                                      : fmt::format("{} s", opt.timeout_s),
               opt.dead_after_s, opt.token.empty() ? "" : ", token required");
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
    // An analysis stops at its next step (AnalysisOptions::cancel); whatever else might hold the stop up (a report
    // folder on a disk that hangs), the end that was asked for comes within 5 s.
    const int status = server.stats().reports > 0 ? 1 : 0;
    std::thread([status] {
        std::this_thread::sleep_for(std::chrono::seconds(5));
        fmt::print(stderr, "{}: serve: still stopping after 5 s: exiting now\n", kProg);
        _exit(status);
    }).detach();
    server.stop();
    return server.stats().reports > 0 ? 1 : 0;
}

}  // namespace

Command add_serve(CLI::App& sub) {
    auto a = std::make_shared<ServeArgs>();
    live::ServerOptions& o = a->opt;
    auto text = [&](const char* name, const char* type, std::string& out, const char* desc) {
        add_value(
            sub, name, type, desc, [&out](const std::string& v) { return out = v, true; }, "");
    };
    auto seconds = [&](const char* name, double& out, const char* desc) {
        return add_value(
            sub, name, "SEC", desc, [&out](const std::string& v) { return parse_seconds(v, out, 1e7); },
            "a number of seconds (0 to 1e7)");
    };
    auto count = [&](const char* name, size_t& out, const char* desc) {
        add_value(
            sub, name, "N", desc, [&out](const std::string& v) { return parse_count(v, out, true); },
            "a count (digits, optionally K, M or G)");
    };
    add_endpoint(sub, "--listen",
                 "where ranks connect (default 127.0.0.1:29610, loopback; 0.0.0.0:PORT\nor *:PORT for all "
                 "interfaces, [IPv6]:PORT; port 0 picks a free one,\nprinted at start)",
                 EndpointKind::Listen, o.listen);
    add_endpoint(sub, "--metrics",
                 "serve Prometheus text (OpenMetrics when asked for) at\nhttp://HOST:PORT/metrics (default off; "
                 "port 0 picks a free one)",
                 EndpointKind::Listen, o.metrics_listen);
    // Without --timeout, each job's own: the shortest its ranks run with (NCCLWATCH_TIMEOUT_SEC; 60 until they say).
    o.timeout_from_ranks = true;
    add_value(
        sub, "--timeout", "SEC",
        "seconds without progress before a stall is reported (default: the\nranks' own NCCLWATCH_TIMEOUT_SEC, 60 "
        "until they say)",
        [&o](const std::string& v) { return o.timeout_from_ranks = false, parse_seconds(v, o.timeout_s, 1e7); },
        "a number of seconds (0 to 1e7)");
    seconds("--dead-after", o.dead_after_s,
            "grace after a rank's connection drops and its frames stop before it\nis DEAD (default 10)");
    text("--out", "DIR", o.out_dir, "also write the reports under DIR/<job>/");
    sub.add_flag("--once", a->once, "exit after the first report (status 1; 0 when stopped with nothing\nfound)");
    sub.add_flag("--quiet", o.quiet, "no report on stdout (log lines on stderr only)");
    sub.add_flag("--insecure", a->insecure,
                 "listen on a non-loopback --listen address without NCCLWATCH_TOKEN\n(refused otherwise: anyone "
                 "who reaches the port could speak for a rank)");
    // Issue 45, item 3: a collector that runs as a service user takes its own user's ranks only, unless told.
    auto allow = [&](const char* name, const char* type, const char* what, bool (*parse)(const std::string&, uint32_t&),
                     const char* desc) {
        sub.add_option_function<std::vector<std::string>>(
               name,
               [&o, name, what, parse](const std::vector<std::string>& values) {
                   for (const std::string& v : values) {
                       uint32_t uid = 0;
                       if (!parse(v, uid))
                           throw CLI::ValidationError(fmt::format("{}: '{}' is not {}", name, clean(v), what));
                       o.allowed_uids.push_back(uid);
                   }
               },
               desc)
            ->type_name(type)
            ->delimiter(',');
    };
    allow("--allow-uid", "UID", "a uid (digits, below 4294967295)", parse_uid,
          "without a token, also take the ranks of these users, by uid\n(comma-separated or repeated; by default only "
          "those of the user\nserve runs as)");
    allow("--allow-user", "NAME", "a user of this host", uid_of_user, "the same by user name, looked up at start");
    sub.add_flag("--metrics-ids", o.metrics_ids,
                 "with a token, /metrics still shows job ids and communicator ids\n(by default they are replaced "
                 "by keyed hashes, so a scrape tells no\nimpostor whom to claim)");
    // For the tests: how often the analysis runs, and no DumpRequest to the ranks.
    seconds("--analyze-period", o.analyze_period_s, "")->group("");
    sub.add_flag_callback("--no-dumps", [&o] { o.request_dumps = false; })->group("");
    const char* limits = "Limits";
    count("--max-connections", o.max_connections, "connections open at once; more are closed at once (default 262144)");
    count("--max-ranks", o.max_ranks, "ranks (job, global rank) kept (default 262144)");
    count("--max-jobs", o.max_jobs,
          "jobs kept (default 4096); past either, the idle job (no rank\nconnected) heard from least recently is "
          "forgotten, then a connected one\nwithout progress; only when every job is training is a rank refused\n"
          "(\"collector full\", for now)");
    count("--max-job-ranks", o.max_job_ranks,
          "ranks of one job (default 65536); a communicator that claims more\nis set aside, not analysed");
    count("--max-rank-bytes", o.max_rank_bytes,
          "estimated bytes of one rank's state (default 32M: the most a rank\ncan send is about 20M); past it its "
          "communicators are dropped and\nits connection refused");
    count("--max-job-bytes", o.max_job_bytes,
          "the same for one job's ranks together (default 4G); past it the\nrank that grew it is refused, and new "
          "ranks of the job");
    count("--max-unproven", o.max_unproven,
          "connections without a Hello (default 4096; 256 per remote address):\npast it the oldest of them is "
          "closed, never a rank's");
    seconds("--retention", o.retention_s,
            "a job with no rank connected and silent this long is forgotten with\nits series (default 600); a job "
            "whose ranks all said Bye goes at once");
    seconds("--hello-timeout", o.hello_timeout_s,
            "a connection that sends no Hello (or /metrics request) within this\nis closed (default 10)");
    seconds("--frame-timeout", o.frame_timeout_s,
            "a frame not complete this long after its first byte closes its\nconnection (default 10)");
    count("--max-conn-buffer", o.max_conn_buffer,
          "bytes of a partly received frame per connection (default 1M+16,\nthe wire maximum)");
    count("--buffer-budget", o.max_buffered_total,
          "the same, all connections together; the connection that goes over\nis closed (default 64M)");
    count("--metrics-max-bytes", o.metrics_max_bytes,
          "one /metrics response; series past it are left out, the ranks a\nverdict names first, and counted in "
          "ncclwatch_collector_metrics_series_dropped\n(default 16000000)");
    count("--metrics-budget", o.metrics_queue_max,
          "/metrics renderings held for scrapers, all together; past it a\nscraper gets the newest rendering "
          "already held (default 64M)");
    seconds("--scrape-timeout", o.scrape_timeout_s,
            "a scraper that reads nothing of its response this long is closed\n(default 10)");
    for (const char* n :
         {"--max-connections", "--max-ranks", "--max-jobs", "--max-job-ranks", "--max-rank-bytes", "--max-job-bytes",
          "--max-unproven", "--retention", "--hello-timeout", "--frame-timeout", "--max-conn-buffer", "--buffer-budget",
          "--metrics-max-bytes", "--metrics-budget", "--scrape-timeout"})
        sub.get_option(n)->group(limits);
    sub.footer(
        R"(Ranks whose shim has NCCLWATCH_COLLECTOR=HOST:PORT connect and send digests; a stall past the timeout, a mismatch
or a dead rank is reported once (text on stdout, and OUT/<job>/live-report.txt and .json), and every rank of that
job is asked to write its dump. "recovered" is logged when it clears.
Limits keep any client, hostile or broken, from growing the collector without bound; the defaults hold 16,384 ranks;
N takes K, M or G for binary multiples. Refused and bad clients are logged rate-limited per cause (bad magic,
oversize, timeout, wrong token, full, ...), with a summary of what was left out every minute; a wrong token always
has its own budget.
With NCCLWATCH_TOKEN set in its environment, a rank must prove it holds the same token: it answers a fresh nonce
with an HMAC-SHA256 over the nonce and its Hello (live protocol 1.2); the token never travels. A rank older than
1.2 is refused with a message saying so. Whatever the token, a rank's identity is bound to its connection: a second
Hello for a (job, rank) whose connection is alive is refused and logged. Without a token, only ranks of the user
serve runs as are taken, and those of the users --allow-uid or --allow-user name (the user of a connection's socket
is the kernel's word); another user's rank is refused and logged, naming the option. A Hello from this host proves
the pid it claims (the process must hold the connection's socket, or be that pid in its own pid namespace, the last
of its NSpid line; where serve may not read that user's descriptors, not being root, the pid must be a process of
that user), or is refused and logged; the process proven is the rank's identity (its liveness), the pid it says
only a label. A relay (1.16) proves each of its ranks the same way and forwards what it found: taken only from a
relay that runs as a user serve takes, and a relay of another user than serve's speaks for its own user's ranks only.
A rank of the collector's user takes its slot back from another user's process.
A job's cost follows what its ranks sent, never what they claim: a communicator claiming more ranks than
--max-job-ranks is set aside, and so are those whose absent ranks are more than the job's ranks reported; without a
token a process is one rank; a rank and a job are held to --max-rank-bytes and --max-job-bytes; when full, a job whose
counts grew in the last 2 minutes is never forgotten for room (unless a proven rank needs it and the job is unproven),
a connected one without progress may be.
SIGINT or SIGTERM stops it. Exit status: 0 stopped with nothing found, 1 a report was made, 2 usage error or the
listener could not start.)");
    return [a] { return run_serve(*a); };
}

}  // namespace ncw::cli

// fake_launch: a tiny torchrun for fake NCCL jobs.
//
//   fake_launch --nproc N [--timeout-sec T] [--env K=V ...] [--kill-on-first-failure] -- <program> [args...]
//
// Forks N ranks with the torchrun environment plus FAKE_NCCL_ID_FILE (where rank 0 publishes the unique id) and
// FAKE_NCCL_SHM_TAG (names this job's shared-memory segments so that leftovers can be removed), waits for
// them and prints one line per rank, in rank order: "exit rank=<R> status=<exit code | signal name>". Exits 0 when
// every rank exited 0, 1 otherwise, 2 on a usage error. Nothing else goes to stdout.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kTermGrace = std::chrono::seconds(5);  // SIGTERM, then SIGKILL after this, as torchrun does

struct Args {
    int nproc = 0;
    double timeout_sec = 300;
    std::vector<std::string> env;
    bool kill_on_first_failure = false;
    double term_delay_s = 0;  // --kill-on-first-failure: SIGTERM this long after the failure (torchrun: its monitor)
    std::vector<std::string> command;
};

void usage(const char* msg) {
    std::fprintf(stderr,
                 "fake_launch: %s\nusage: fake_launch --nproc N [--timeout-sec T] [--env K=V ...] "
                 "[--kill-on-first-failure [--term-delay-ms M]] -- <program> [args...]\n",
                 msg);
}

bool parse(int argc, char** argv, Args& a) {
    int i = 1;
    for (; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--") {
            ++i;
            break;
        }
        std::string value;
        bool has_value = false;
        if (size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
            value = arg.substr(eq + 1);
            arg.resize(eq);
            has_value = true;
        }
        auto take = [&]() {
            if (!has_value && i + 1 < argc) {
                value = argv[++i];
                has_value = true;
            }
            return has_value;
        };
        if (arg == "--kill-on-first-failure") {
            a.kill_on_first_failure = true;
        } else if (arg == "--term-delay-ms") {
            if (!take()) return false;
            a.term_delay_s = std::atof(value.c_str()) / 1000.0;
        } else if (arg == "--nproc" || arg == "--nproc-per-node" || arg == "--nproc_per_node") {
            if (!take() || (a.nproc = std::atoi(value.c_str())) < 1 || a.nproc > 256) return false;
        } else if (arg == "--timeout-sec") {
            if (!take() || (a.timeout_sec = std::atof(value.c_str())) <= 0) return false;
        } else if (arg == "--env") {
            if (!take() || value.find('=') == std::string::npos || value[0] == '=') return false;
            a.env.push_back(value);
        } else {
            return false;
        }
    }
    for (; i < argc; ++i) a.command.emplace_back(argv[i]);
    return a.nproc > 0 && !a.command.empty();
}

std::string random_hex(size_t bytes) {
    std::vector<unsigned char> raw(bytes);
    if (getrandom(raw.data(), raw.size(), 0) != static_cast<ssize_t>(raw.size())) {
        // Fall back on time and pid: only uniqueness within this machine matters.
        unsigned long long seed = static_cast<unsigned long long>(Clock::now().time_since_epoch().count()) ^
                                  (static_cast<unsigned long long>(getpid()) << 32);
        for (auto& b : raw) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            b = static_cast<unsigned char>(seed >> 56);
        }
    }
    std::string out;
    char hex[3];
    for (unsigned char b : raw) {
        std::snprintf(hex, sizeof hex, "%02x", b);
        out += hex;
    }
    return out;
}

std::string signal_name(int sig) {
    static const std::pair<int, const char*> names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
    };
    for (const auto& [num, name] : names)
        if (num == sig) return name;
    return "SIG" + std::to_string(sig);
}

// Removes what the job may have left: the id file and rank 0's temporary for it (the framework writes
// "<id file>.tmp.<pid>" and renames it), and the job's segments (ranks killed during init never unlink theirs).
void cleanup(const std::string& id_file, pid_t rank0, const std::string& shm_tag) {
    unlink(id_file.c_str());
    if (rank0 > 0) unlink((id_file + ".tmp." + std::to_string(rank0)).c_str());
    std::string prefix = "fakenccl-" + shm_tag + "-";
    if (DIR* d = opendir("/dev/shm")) {
        while (dirent* e = readdir(d)) {
            if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
                shm_unlink(("/" + std::string(e->d_name)).c_str());
            }
        }
        closedir(d);
    }
}

struct Rank {
    pid_t pid = -1;
    bool running = false;
    int status = 0;  // waitpid status once it has exited
};

}  // namespace

int main(int argc, char** argv) {
    Args args;
    if (!parse(argc, argv, args)) {
        usage("bad arguments");
        return 2;
    }

    // No directory of our own: rank 0 removes the id file once the world communicator is up, so a launcher that is
    // itself SIGKILLed (e.g. by a test harness) leaves nothing behind.
    const char* tmp_root = std::getenv("TMPDIR");
    const std::string run_id = random_hex(8);
    const std::string id_file = std::string(tmp_root != nullptr && *tmp_root != '\0' ? tmp_root : "/tmp") +
                                "/fake_launch-" + run_id + ".ncclid";
    // MASTER_PORT (and the ports after it that NCCLWATCH_COLLECTOR=auto takes) below Linux's ephemeral range
    // (32768-60999 by default): a test that opens thousands of connections beside this job cannot hold them.
    unsigned port = 20000 + static_cast<unsigned>(std::strtoul(run_id.substr(0, 8).c_str(), nullptr, 16) % 12000);

    // Children exits and the launcher's own termination signals are taken synchronously with sigtimedwait: no
    // handler, no fixed sleep, and no exit can slip between a waitpid and the wait for the next one.
    sigset_t waited, old_mask;
    sigemptyset(&waited);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&waited, sig);
    sigprocmask(SIG_BLOCK, &waited, &old_mask);

    const pid_t launcher = getpid();
    std::vector<Rank> ranks(args.nproc);
    std::fflush(nullptr);
    for (int r = 0; r < args.nproc; ++r) {
        pid_t pid = fork();
        if (pid < 0) {
            std::perror("fake_launch: fork");
            for (int k = 0; k < r; ++k) kill(ranks[k].pid, SIGKILL);
            while (wait(nullptr) > 0) {
            }
            cleanup(id_file, ranks[0].pid, run_id);
            return 1;
        }
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old_mask, nullptr);
            // Ranks must not outlive a launcher that is killed (e.g. by a test harness timeout).
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != launcher) _exit(1);
            auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
            set("RANK", std::to_string(r));
            set("LOCAL_RANK", std::to_string(r));
            set("WORLD_SIZE", std::to_string(args.nproc));
            set("LOCAL_WORLD_SIZE", std::to_string(args.nproc));
            set("GROUP_RANK", "0");
            set("MASTER_ADDR", "127.0.0.1");
            set("MASTER_PORT", std::to_string(port));
            set("TORCHELASTIC_RUN_ID", "fakelaunch-" + run_id);
            set("TORCHELASTIC_RESTART_COUNT", "0");
            set("FAKE_NCCL_ID_FILE", id_file);
            set("FAKE_NCCL_SHM_TAG", run_id);
            for (const std::string& kv : args.env) {
                size_t eq = kv.find('=');
                setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
            }
            std::vector<char*> child_argv;
            for (std::string& s : args.command) child_argv.push_back(s.data());
            child_argv.push_back(nullptr);
            execvp(child_argv[0], child_argv.data());
            std::fprintf(stderr, "fake_launch: exec %s: %s\n", child_argv[0], std::strerror(errno));
            _exit(127);
        }
        ranks[r] = Rank{pid, true, 0};
    }

    int running = args.nproc;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.timeout_sec));
    bool timed_out = false;
    bool terminating = false;  // SIGTERM sent to the ranks (first failure, or the launcher was told to stop)
    bool interrupted = false;
    constexpr Clock::time_point kNever = Clock::time_point::max();
    Clock::time_point kill_at = kNever;  // when to SIGKILL the ranks that ignored SIGTERM
    Clock::time_point term_at = kNever;  // when to SIGTERM the ranks after a failure (--term-delay-ms)

    auto signal_running = [&](int sig) {
        for (const Rank& rk : ranks)
            if (rk.running) kill(rk.pid, sig);
    };
    auto terminate_all = [&] {
        if (terminating) return;
        terminating = true;
        signal_running(SIGTERM);
        kill_at = Clock::now() + kTermGrace;
    };

    while (running > 0) {
        int status = 0;
        pid_t pid;
        while (running > 0 && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < args.nproc; ++r) {
                if (ranks[r].pid != pid || !ranks[r].running) continue;
                ranks[r].running = false;
                ranks[r].status = status;
                --running;
                bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
                if (failed && args.kill_on_first_failure && running > 0 && term_at == kNever) {
                    std::fprintf(stderr, "fake_launch: rank %d failed; terminating the other ranks\n", r);
                    term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(args.term_delay_s));
                }
            }
        }
        if (running == 0) break;

        Clock::time_point now = Clock::now();
        if (now >= term_at) {
            term_at = kNever;
            terminate_all();
        }
        if (!timed_out && now >= deadline) {
            timed_out = true;
            std::fprintf(stderr, "fake_launch: timeout after %g s; killing %d running rank(s)\n", args.timeout_sec,
                         running);
            signal_running(SIGKILL);
            kill_at = kNever;
        }
        if (now >= kill_at) {
            signal_running(SIGKILL);
            kill_at = kNever;
        }

        // Sleep until a child exits, a signal arrives or the next deadline passes.
        Clock::time_point wake = now + std::chrono::seconds(1);  // once everything is killed, only reaping is left
        if (!timed_out) wake = std::min(wake, deadline);
        wake = std::min({wake, kill_at, term_at});
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now);
        if (left.count() < 0) left = std::chrono::nanoseconds(0);
        timespec ts{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
        int sig = sigtimedwait(&waited, nullptr, &ts);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
            std::fprintf(stderr, "fake_launch: got %s; terminating the ranks\n", signal_name(sig).c_str());
            interrupted = true;
            terminate_all();
        }
    }

    bool all_ok = !interrupted;
    for (int r = 0; r < args.nproc; ++r) {
        int st = ranks[r].status;
        std::string what;
        if (WIFEXITED(st)) {
            what = std::to_string(WEXITSTATUS(st));
            all_ok &= WEXITSTATUS(st) == 0;
        } else {
            what = WIFSIGNALED(st) ? signal_name(WTERMSIG(st)) : "unknown";
            all_ok = false;
        }
        std::printf("exit rank=%d status=%s\n", r, what.c_str());
    }
    std::fflush(stdout);
    cleanup(id_file, ranks[0].pid, run_id);
    return all_ok ? 0 : 1;
}

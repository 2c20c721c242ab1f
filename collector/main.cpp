// ncclwatch-collector: reads rank files after the fact (or while the job hangs) and names the culprit. One file per
// command (cmd_*.cpp); this one only dispatches.
#include <fmt/format.h>

#include <exception>
#include <string>
#include <vector>

#include "cli.h"

namespace ncw::cli {

const char* const kUsage = R"(usage: ncclwatch-collector COMMAND [ARGS]

Commands:
  analyze [--json] [--trace FILE [--trace-ops N]] [--color WHEN] [--all-ranks] [--timeout SEC]
          DIR_OR_FILE...
        Read every rank file (*.ncw; folders are searched recursively: give one folder per node, or one
        shared folder) and name what holds up each communicator of each job: DEAD, EXTRA_OP, NOT_JOINED,
        MISMATCH, INIT_HANG, ASYNC_ERROR, GPU_NOT_REACHED, STUCK_IN_NCCL, STRAGGLER. Files of several jobs
        are reported per job; missing ranks and unreadable or truncated files are named, the rest analysed.
        "Now" is the newest heartbeat of each job, so files copied later still read as of the hang.
        The report starts with one verdict line naming the culprit (rank, host, GPU, pid), then the
        evidence, the per-communicator table and "Also noticed".
        --timeout SEC  seconds without progress before an outstanding op counts as stalled (default 0)
        --json         one JSON object instead of the report (schema ncclwatch.analysis/2,
                       docs/schemas/analysis.schema.json)
        --trace FILE   also write the rings as a Chrome/Perfetto trace (one track per rank, grouped by host;
                       open in ui.perfetto.dev or chrome://tracing); "-" = stdout
                       instead of the report
        --trace-ops N  the newest N operations per rank in the trace (default 500; 0 = the whole ring)
        --color WHEN   colour the report: auto (a terminal and NO_COLOR unset), always, never
        --all-ranks    one table row per rank (big communicators group identical rows by default)
        Exit status: 0 nothing found (or only stragglers), 1 a hang or mismatch found,
        2 usage error or no readable file.
  dump [--json] FILE
        Decode one rank file: header, communicators and every valid record, in ticket order.
  serve [--listen HOST:PORT] [--metrics HOST:PORT] [--timeout SEC] [--dead-after SEC] [--out DIR]
        [--once] [--quiet] [--insecure] [--metrics-ids] [LIMITS]
        The live collector: ranks whose shim has NCCLWATCH_COLLECTOR=HOST:PORT connect and send digests; a stall
        past the timeout, a mismatch or a dead rank is reported once (text on stdout, and OUT/<job>/live-report.txt
        and .json), and every rank of that job is asked to write its dump. "recovered" is logged when it clears.
        --listen HOST:PORT   where ranks connect (default 127.0.0.1:29610, loopback; 0.0.0.0:PORT for all
                             interfaces; port 0 picks a free one, printed at start)
        --metrics HOST:PORT  serve Prometheus text at http://HOST:PORT/metrics (default off)
        --timeout SEC        seconds without progress before a stall is reported (default 60)
        --dead-after SEC     grace after a rank's connection drops and its frames stop before it is DEAD (default 10)
        --out DIR            also write the reports under DIR/<job>/
        --once               exit after the first report (status 1; 0 when stopped with nothing found)
        --quiet              no report on stdout (log lines on stderr only)
        --insecure           listen on a non-loopback --listen address without NCCLWATCH_TOKEN (refused otherwise:
                             anyone who reaches the port could speak for a rank)
        --metrics-ids        with a token, /metrics still shows job ids, communicator ids and pids (by default
                             they are replaced by keyed hashes, and pids by 0, so a scrape tells no impostor whom
                             to claim)
        Limits (so that no client, hostile or broken, can grow the collector without bound; the defaults hold
        16,384 ranks; N takes K, M or G for binary multiples):
        --max-connections N  connections open at once; more are closed at once (default 65536)
        --max-ranks N        ranks (job, global rank) kept (default 65536)
        --max-jobs N         jobs kept (default 4096); past either, the idle job (no rank connected) heard
                             from least recently is forgotten, and only when none is idle is a rank refused
                             ("collector full")
        --retention SEC      a job with no rank connected and silent this long is forgotten with its series
                             (default 600); a job whose ranks all said Bye goes at once
        --hello-timeout SEC  a connection that sends no Hello (or /metrics request) within this is closed
                             (default 10)
        --frame-timeout SEC  a frame not complete this long after its first byte closes its connection (default 10)
        --max-conn-buffer N  bytes of a partly received frame per connection (default 1M+16, the wire maximum)
        --buffer-budget N    the same, all connections together; the connection that goes over is closed
                             (default 64M)
        --metrics-max-bytes N  one /metrics response; series past it are left out, the ranks a verdict names
                             first, and counted in ncclwatch_collector_metrics_series_dropped (default 16000000)
        --metrics-budget N   /metrics renderings held for scrapers, all together; past it a scraper gets the newest
                             rendering already held (default 64M)
        --scrape-timeout SEC a scraper that reads nothing of its response this long is closed (default 10)
        Refused and bad clients are logged rate-limited per cause (bad magic, oversize, timeout, wrong token,
        full, ...), with a summary of what was left out every minute; a wrong token always has its own budget.
        With NCCLWATCH_TOKEN set in its environment, a rank must prove it holds the same token: it answers a fresh
        nonce with an HMAC-SHA256 over the nonce and its Hello (live protocol 1.2); the token never travels. A rank
        older than 1.2 is refused with a message saying so. Whatever the token, a rank's identity is bound to its
        connection: a second Hello for a (job, rank) whose connection is alive is refused and logged.
        SIGINT or SIGTERM stops it.
  env   List the NCCLWATCH_* environment variables the shim reads.
  help, --help, -h
        This text.
)";

}  // namespace ncw::cli

int main(int argc, char** argv) {
    try {
        if (argc < 2) {
            fmt::print(stderr, "{}", ncw::cli::kUsage);
            return 2;
        }
        const std::string cmd = argv[1];
        const std::vector<std::string> args(argv + 2, argv + argc);
        if (cmd == "--help" || cmd == "-h" || cmd == "help") {
            fmt::print("{}", ncw::cli::kUsage);
            return 0;
        }
        if (cmd == "env") return ncw::cli::cmd_env();
        if (cmd == "analyze") return ncw::cli::cmd_analyze(args);
        if (cmd == "dump") return ncw::cli::cmd_dump(args);
        if (cmd == "serve") return ncw::cli::cmd_serve(args);
        fmt::print(stderr, "{}: unknown command '{}'\n\n{}", ncw::cli::kProg, cmd, ncw::cli::kUsage);
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: {}\n", ncw::cli::kProg, e.what());
        return 2;
    }
}

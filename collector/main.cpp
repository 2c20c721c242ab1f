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
  analyze [--json] [--timeout SEC] DIR_OR_FILE...
        Read every rank file (*.ncw; folders are searched recursively) and name what holds up each
        communicator: DEAD, NOT_JOINED, MISMATCH, ASYNC_ERROR, GPU_NOT_REACHED, STUCK_IN_NCCL.
        "Now" is the newest heartbeat of each job, so files copied later still read as of the hang.
        --timeout SEC  seconds without progress before an outstanding op counts as stalled (default 0)
        --json         one JSON object (schema ncclwatch.analysis/1) instead of the report
        Exit status: 0 nothing found, 1 a hang or mismatch found, 2 usage error or no readable file.
  dump [--json] FILE
        Decode one rank file: header, communicators and every valid record, in ticket order.
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
        fmt::print(stderr, "{}: unknown command '{}'\n\n{}", ncw::cli::kProg, cmd, ncw::cli::kUsage);
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: {}\n", ncw::cli::kProg, e.what());
        return 2;
    }
}

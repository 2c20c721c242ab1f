// NCCLWATCH_* configuration, parsed once from the environment using the table in ncclwatch/config_table.h.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ncw {

enum class Action { Report, Abort, Kill };
enum class GpuSample { Auto, All };

struct Config {
    bool enable = true;
    std::string dir;     // resolved: NCCLWATCH_DIR or ${TMPDIR:-/tmp}/ncclwatch
    std::string job_id;  // empty = derive from the launcher
    double timeout_sec = 60;
    int poll_ms = 100;
    Action action = Action::Report;
    int ring_size = 16384;  // power of two after parsing
    bool gpu_events = true;
    bool gpu_reached = true;
    GpuSample gpu_sample = GpuSample::Auto;
    bool backtrace = false;
    int backtrace_depth = 16;
    bool dump_at_exit = false;
    bool mismatch_check = true;
    std::string nccl_library;
    std::string log_level = "info";
    // Live digests (digest_client.h).
    std::string collector;   // "" = off, HOST:PORT, or "auto" (validated at parse)
    int collector_port = 0;  // resolved at parse: NCCLWATCH_COLLECTOR_PORT, else MASTER_PORT+1, else 29610
    std::string token;
    int digest_ms = 200;
    double dead_after_sec = 10;
};

using GetEnv = std::function<const char*(const char*)>;

// Parses every variable in the table. A bad value leaves the default in place and adds one warning that names the
// variable, the value, the accepted values and the default.
Config parse_config(const GetEnv& getenv_fn, std::vector<std::string>& warnings);

const char* action_name(Action a);

}  // namespace ncw

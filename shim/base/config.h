// NCCLWATCH_* configuration, parsed once from the environment using the table in ncclwatch/config_table.h.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ncclwatch/config_table.h"
#include "shim/base/config_default.h"

namespace ncw {

enum class Action { Report, Abort, Kill };
enum class GpuSample { Auto, All };
enum class ProfilerMode { Auto, Off, Empty };
enum class LogFormat { Short, Full };

// One member per row of include/ncclwatch/config_table.h, starting at the row's DEFAULT. After parse_config, dir is
// resolved (NCCLWATCH_DIR or ${TMPDIR:-/tmp}/ncclwatch), ring_size a power of two, collector validated ("" = off,
// HOST:PORT or "auto") and collector_port resolved (NCCLWATCH_COLLECTOR_PORT, else MASTER_PORT+1, else 29610).
struct Config {
#define NCW_CONFIG_MEMBER(field, name, kind, type, def, accepted, desc) \
    type field = config_default::value<type>(#field, config_default::Kind::kind, def, accepted);
    NCW_CONFIG_TABLE(NCW_CONFIG_MEMBER)
#undef NCW_CONFIG_MEMBER
};

// Every default is a constant: a DEFAULT that does not parse as its KIND (or an Enum default not in ACCEPTED) stops
// the build here.
#define NCW_CONFIG_CHECK(field, name, kind, type, def, accepted, desc) \
    static_assert((config_default::value<type>(#field, config_default::Kind::kind, def, accepted), true));
NCW_CONFIG_TABLE(NCW_CONFIG_CHECK)
#undef NCW_CONFIG_CHECK

using GetEnv = std::function<const char*(const char*)>;

// Parses every variable in the table. A bad value leaves the default in place and adds one warning that names the
// variable, the value, the accepted values and the default.
Config parse_config(const GetEnv& getenv_fn, std::vector<std::string>& warnings);

// NCCLWATCH_NCCL_LIBRARY alone, parsed through its table row: the resolver needs it on the first NCCL call, which
// may come before the runtime (and its Config) exists.
std::string parse_nccl_library(const GetEnv& getenv_fn);

const char* action_name(Action a);

// The auto collector port: NCCLWATCH_COLLECTOR_PORT when set, else MASTER_PORT+1, else 29610.
int derive_auto_port(int configured_port, const char* master_port);

}  // namespace ncw

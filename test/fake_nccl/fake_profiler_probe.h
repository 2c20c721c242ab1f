// What the profiler probe (fake_profiler_probe.cpp) records, as fake_nccl_versions_selftest reads it.
#pragma once

#include <cstdint>

namespace ncw::fake {

struct ProbeEvent {
    int table;  // the version of the table NCCL called
    uint64_t type;
    char func[24];
    uint64_t user_tag;    // v7: the Coll's, CollApi's, P2p's or P2pApi's
    bool kernel_variant;  // v7: a Coll named its kernel
};

struct ProbeLog {
    int init_version;  // the table whose init NCCL called (0: none)
    int inits;
    int events;
    ProbeEvent ev[512];
};

}  // namespace ncw::fake

// extern "C" const ncw::fake::ProbeLog* fake_profiler_probe_log(): the plugin's record.

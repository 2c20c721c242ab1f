// The environment audit: what in the ranks' environments and set-up can cause or hide a hang, from the rank files'
// headers (HeaderInfo::env and the identity fields) and communicator slots. Pure: no I/O.
//   - differences across ranks: NCCL / driver version, NCCL_* and TORCH_NCCL_* values, world size, master addr/port;
//   - two ranks on one GPU of one host; LOCAL_RANK not matching the device in use;
//   - variables that do nothing: NCCL_* names the running NCCL never reads, TORCH_NCCL_* names libtorch never reads,
//     with the current name where one exists;
//   - risky combinations (NCCL_NET_GDR_LEVEL=2 with NCCL_P2P_DISABLE=1, NCCL_SOCKET_IFNAME=lo on several hosts).
#pragma once

#include <string>
#include <vector>

#include "read/rank_file.h"

namespace ncw::audit {

enum class Severity { Info, Warning, Error };

struct Finding {
    Severity severity = Severity::Warning;
    std::string topic;                  // short machine-readable key: "version_mismatch", "no_effect", ...
    std::string summary;                // one line in plain words
    std::vector<std::string> evidence;  // which ranks / hosts / values
    std::vector<int> ranks;             // global ranks concerned (may be empty)
};

const char* severity_name(Severity s);  // "info", "warning", "error"

// One process as the audit sees it.
struct ProcessFacts {
    const HeaderInfo* header = nullptr;
    const std::vector<CommInfo>* comms = nullptr;
};

std::vector<Finding> audit_job(const std::vector<ProcessFacts>& procs);

}  // namespace ncw::audit

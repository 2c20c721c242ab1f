// The environment audit: what in the ranks' environments and set-up can cause or hide a hang, from the rank files'
// headers (HeaderInfo::env and the identity fields) and communicator slots. Pure: no I/O.
//   - differences across ranks: NCCL / driver version, NCCL_* and TORCH_NCCL_* values, world size, master addr/port;
//   - two ranks on one GPU of one host; LOCAL_RANK not matching the device in use;
//   - variables that do nothing: NCCL_* names the running NCCL never reads, TORCH_NCCL_* names libtorch never reads,
//     with the current name where one exists;
//   - risky combinations (NCCL_NET_GDR_LEVEL=2 with NCCL_P2P_DISABLE=1, NCCL_SOCKET_IFNAME=lo on several hosts).
#pragma once

#include <string>
#include <string_view>
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

// The settings NCCL reads on each rank on its own and needs every rank of a communicator to agree on, with why: the
// one list (the audit reports their differences as "setting_mismatch", an error, and the engine leads a stall with
// them: engine/verdict_settings.h). X(name, why)
#define NCW_MUST_AGREE_SETTINGS(X)                                                                      \
    X("NCCL_ALGO",                                                                                      \
      "each rank picks every op's algorithm from its own NCCL_ALGO: ranks that disagree run different " \
      "algorithms for one op and wait for each other")                                                  \
    X("NCCL_PROTO",                                                                                     \
      "each rank picks every op's protocol from its own NCCL_PROTO: ranks that disagree exchange data " \
      "in different protocols for one op and wait for each other")                                      \
    X("NCCL_TUNER_PLUGIN",                                                                              \
      "the tuner picks each op's algorithm and protocol on each rank: ranks with different "            \
      "tuners can pick differently for one op")                                                         \
    X("NCCL_BUFFSIZE",                                                                                  \
      "each rank sizes its steps from its own buffer size: a sender and a receiver that disagree "      \
      "wait for steps that never come")                                                                 \
    X("NCCL_NTHREADS",                                                                                  \
      "each rank sizes its chunks from its own thread count: ranks that disagree split one op "         \
      "differently")                                                                                    \
    X("NCCL_P2P_NET_CHUNKSIZE",                                                                         \
      "a sender and a receiver that disagree on the chunk size of sends over the network "              \
      "wait for chunks that never come")                                                                \
    X("NCCL_P2P_NVL_CHUNKSIZE",                                                                         \
      "a sender and a receiver that disagree on the chunk size of sends over NVLink wait "              \
      "for chunks that never come")                                                                     \
    X("NCCL_P2P_PCI_CHUNKSIZE",                                                                         \
      "a sender and a receiver that disagree on the chunk size of sends over PCI wait for "             \
      "chunks that never come")                                                                         \
    X("NCCL_P2P_LL_THRESHOLD",                                                                          \
      "each side of a send picks its protocol from its own threshold: a sender and a "                  \
      "receiver that disagree use different protocols for one message")

// Why a setting must agree across ranks (NCW_MUST_AGREE_SETTINGS), or nullptr when it need not.
const char* must_agree_why(std::string_view name);

// Only the differences in the settings that must agree (NCW_MUST_AGREE_SETTINGS), one "setting_mismatch" finding
// per setting (ranks: the minority's global ranks). Cheap: no other variable is parsed.
std::vector<Finding> must_agree_differences(const std::vector<ProcessFacts>& procs);

}  // namespace ncw::audit

// Who this process is in the job, from the launcher's environment (torchrun, OpenMPI, Slurm, PMI), and which job
// folder it belongs to, so that ranks of one job share a folder and a later job or restart gets its own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shim/base/config.h"

namespace ncw {

struct ProcessIdentity {
    int global_rank = -1;
    int local_rank = -1;
    int world_size = -1;
    int local_world_size = -1;
    std::string launcher;  // "torchrun", "slurm", "openmpi", "pmi", "none"
    std::string host;
    int64_t pid = 0;
    std::string job_id;  // a folder name: letters, digits, '.', '_', '-'
};

ProcessIdentity detect_identity(const GetEnv& getenv_fn, const std::string& job_id_override, const std::string& host,
                                int64_t pid, int64_t ppid);

// Keeps letters, digits, '.', '_' and '-'; everything else becomes '_'. Never empty, never "." or "..".
std::string sanitize_component(const std::string& s);

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The variables a hang investigation needs: launcher (torchrun, Slurm, OpenMPI, PMI), MASTER_ADDR/PORT,
// CUDA_VISIBLE_DEVICES, NCCL_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, NCCLWATCH_*. Sorted by name.
// Redacted at capture by read/redact.h's rule, so that no file, dump or live frame ever holds a secret: a secret
// name's value becomes "<redacted>", and so do the credentials inside any other value (a URL's password, ?token=...).
EnvList snapshot_env(char** envp);

}  // namespace ncw

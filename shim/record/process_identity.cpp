#include "shim/record/process_identity.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "read/redact.h"
#include "read/safe_write.h"

namespace ncw {
namespace {

int env_int(const GetEnv& getenv_fn, std::initializer_list<const char*> names) {
    for (const char* n : names) {
        const char* v = getenv_fn(n);
        if (!v || !*v) continue;
        char* end = nullptr;
        long x = strtol(v, &end, 10);
        if (end != v && *end == '\0' && x >= 0 && x < (1L << 30)) return int(x);
    }
    return -1;
}

std::string env_str(const GetEnv& getenv_fn, const char* name) {
    const char* v = getenv_fn(name);
    return v ? v : "";
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string sanitize_component(const std::string& s) {
    std::string out;
    for (char c : s) out += (isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    if (out.empty() || out == "." || out == "..") out = "_" + out;
    if (out.size() > 100) out.resize(100);
    return out;
}

ProcessIdentity detect_identity(const GetEnv& getenv_fn, const std::string& job_id_override, const std::string& host,
                                int64_t pid, int64_t ppid) {
    ProcessIdentity id;
    id.host = host;
    id.pid = pid;
    id.global_rank = env_int(getenv_fn, {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK"});
    id.local_rank =
        env_int(getenv_fn, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"});
    id.world_size = env_int(getenv_fn, {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"});
    id.local_world_size = env_int(
        getenv_fn, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"});

    std::string run_id = env_str(getenv_fn, "TORCHELASTIC_RUN_ID");
    std::string restart = env_str(getenv_fn, "TORCHELASTIC_RESTART_COUNT");
    std::string slurm_job = env_str(getenv_fn, "SLURM_JOB_ID");
    std::string ompi_job = env_str(getenv_fn, "OMPI_MCA_ess_base_jobid");
    if (ompi_job.empty()) ompi_job = env_str(getenv_fn, "PMIX_NAMESPACE");

    std::string job;
    if (!run_id.empty()) {
        id.launcher = "torchrun";
        // torchrun's default run id is "none": then the agent (our parent) and the restart count tell launches apart.
        // An agent is one node, though: when the job spans several (`--nnodes N --node_rank I --master_addr A`, the
        // static rendezvous, whose run id is "none" too), every node's ranks share only the rendezvous address.
        const std::string master_addr = env_str(getenv_fn, "MASTER_ADDR");
        const std::string master_port = env_str(getenv_fn, "MASTER_PORT");
        const bool multi_node = id.world_size > 0 && id.local_world_size > 0 && id.world_size > id.local_world_size;
        if (run_id != "none")
            job = "torchrun-" + run_id;
        else if (multi_node && !master_addr.empty() && !master_port.empty())
            job = "torchrun-" + master_addr + "-" + master_port;
        else
            job = "torchrun-" + host + "-" + std::to_string(ppid);
        job += "-attempt" + (restart.empty() ? std::string("0") : restart);
    } else if (!slurm_job.empty()) {
        id.launcher = "slurm";
        std::string step = env_str(getenv_fn, "SLURM_STEP_ID");
        job = "slurm-" + slurm_job + (step.empty() ? "" : "." + step);
    } else if (!ompi_job.empty()) {
        id.launcher = "openmpi";
        job = "mpi-" + ompi_job;
    } else if (id.global_rank >= 0) {
        id.launcher = getenv_fn("PMI_RANK") ? "pmi" : "env";
        job = "job-" + host + "-" + std::to_string(ppid);
    } else {
        id.launcher = "none";
        job = "solo-" + host + "-" + std::to_string(pid);
    }
    id.job_id = files::job_component(job_id_override.empty() ? job : job_id_override);
    return id;
}

EnvList snapshot_env(char** envp) {
    static const char* const exact[] = {"RANK",
                                        "LOCAL_RANK",
                                        "WORLD_SIZE",
                                        "LOCAL_WORLD_SIZE",
                                        "GROUP_RANK",
                                        "ROLE_RANK",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "CUDA_VISIBLE_DEVICES",
                                        "CUDA_DEVICE_ORDER",
                                        "CUDA_LAUNCH_BLOCKING",
                                        "SLURM_NODEID",
                                        "SLURM_NNODES",
                                        "LD_PRELOAD",
                                        "HOSTNAME"};
    static const char* const prefixes[] = {"NCCL_",         "TORCH_NCCL_",      "TORCH_DISTRIBUTED_", "NCCLWATCH_",
                                           "TORCHELASTIC_", "OMPI_COMM_WORLD_", "SLURM_JOB",          "SLURM_PROC",
                                           "SLURM_LOCAL",   "SLURM_NTASKS",     "SLURM_STEP",         "PMI_",
                                           "PMIX_RANK"};
    EnvList out;
    for (char** e = envp; e && *e; ++e) {
        const char* eq = strchr(*e, '=');
        if (!eq) continue;
        std::string name(*e, eq - *e);
        bool keep =
            std::any_of(std::begin(exact), std::end(exact), [&](const char* x) { return name == x; }) ||
            std::any_of(std::begin(prefixes), std::end(prefixes), [&](const char* p) { return starts_with(name, p); });
        if (!keep) continue;
        out.emplace_back(name, redact::env_value(name, eq + 1));
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace ncw

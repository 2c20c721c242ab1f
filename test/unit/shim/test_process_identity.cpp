#include <catch2/catch.hpp>
#include <map>

#include "shim/record/process_identity.h"

using namespace ncw;

namespace {

ProcessIdentity detect(std::map<std::string, std::string> env, std::string override_id = "") {
    return detect_identity(
        [&](const char* n) -> const char* {
            auto it = env.find(n);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        override_id, "node7", 1234, 1000);
}

}  // namespace

TEST_CASE("torchrun ranks of one launch share a job folder; a restart gets its own") {
    auto a = detect({{"RANK", "3"},
                     {"LOCAL_RANK", "1"},
                     {"WORLD_SIZE", "8"},
                     {"TORCHELASTIC_RUN_ID", "none"},
                     {"TORCHELASTIC_RESTART_COUNT", "0"}});
    CHECK(a.global_rank == 3);
    CHECK(a.local_rank == 1);
    CHECK(a.world_size == 8);
    CHECK(a.launcher == "torchrun");
    CHECK(a.job_id == "torchrun-node7-1000-attempt0");
    auto b = detect({{"RANK", "3"}, {"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_RESTART_COUNT", "1"}});
    CHECK(b.job_id != a.job_id);
    auto c = detect({{"RANK", "0"}, {"TORCHELASTIC_RUN_ID", "abc123"}});
    CHECK(c.job_id == "torchrun-abc123-attempt0");
}

TEST_CASE("torchrun's static rendezvous over several nodes: the nodes' ranks share one job folder name") {
    // torchrun --nnodes 2 --node_rank 0|1 --master_addr node0 --master_port 29500: run id "none" on both agents.
    auto node = [](const char* rank, int64_t agent_pid) {
        return detect_identity(
            [rank](const char* n) -> const char* {
                const std::string k = n;
                if (k == "RANK") return rank;
                if (k == "WORLD_SIZE") return "8";
                if (k == "LOCAL_WORLD_SIZE") return "4";
                if (k == "TORCHELASTIC_RUN_ID") return "none";
                if (k == "TORCHELASTIC_RESTART_COUNT") return "0";
                if (k == "MASTER_ADDR") return "node0";
                if (k == "MASTER_PORT") return "29500";
                return nullptr;
            },
            "", rank[0] < '4' ? "node0" : "node1", 1234, agent_pid);
    };
    CHECK(node("1", 1000).job_id == "torchrun-node0-29500-attempt0");
    CHECK(node("6", 2000).job_id == node("1", 1000).job_id);
}

TEST_CASE("slurm, openmpi, none and an override") {
    CHECK(detect({{"SLURM_PROCID", "5"}, {"SLURM_JOB_ID", "991"}, {"SLURM_STEP_ID", "2"}}).job_id == "slurm-991.2");
    auto m = detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMIX_NAMESPACE", "prterun@1"}});
    CHECK(m.global_rank == 2);
    // '@' replaced: the id keeps its hash, so that "prterun@1" and "prterun_1" stay two jobs (issue 45).
    CHECK(m.job_id.rfind("mpi-prterun_1-", 0) == 0);
    CHECK(m.job_id.size() == std::string("mpi-prterun_1-").size() + 8);
    auto solo = detect({});
    CHECK(solo.global_rank == -1);
    CHECK(solo.job_id == "solo-node7-1234");
    CHECK(detect({{"RANK", "1"}}, "../../etc").job_id.rfind(".._.._etc-", 0) == 0);
}

TEST_CASE("job ids that sanitising would make one stay apart; clean ones stay as they are") {
    const auto id = [](const char* over) { return detect({{"RANK", "1"}}, over).job_id; };
    CHECK(id("train-7b_run.2") == "train-7b_run.2");
    CHECK(id("run-\xc3\xa4") != id("run-\xc3\xb6"));  // run-ä, run-ö: both "run-__" once replaced
    CHECK(id("a/b") != id("a_b"));
    CHECK(id("a_b") == "a_b");
    CHECK(id("run-\xc3\xa4") == id("run-\xc3\xa4"));  // the same id, the same folder on every rank
    const std::string longer(150, 'x');
    CHECK(id(longer.c_str()).size() == 100);
    CHECK(id(longer.c_str()) != id((longer + "y").c_str()));  // cut to 100, apart by their hashes
    for (const char* reserved : {".", ".."}) {
        const std::string r = id(reserved);
        CHECK((r != "." && r != ".." && r.find('/') == std::string::npos));
    }
}

TEST_CASE("the environment snapshot keeps what matters and redacts secrets") {
    char e1[] = "NCCL_DEBUG=INFO";
    char e2[] = "HOME=/root";
    char e3[] = "NCCL_IB_TOKEN=hunter2";
    char e4[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING=1";
    char e5[] = "CUDA_VISIBLE_DEVICES=0,1";
    char e6[] = "NCCLWATCH_API_KEY=x";
    char* envp[] = {e1, e2, e3, e4, e5, e6, nullptr};
    EnvList env = snapshot_env(envp);
    std::map<std::string, std::string> m(env.begin(), env.end());
    CHECK(m.count("HOME") == 0);
    CHECK(m["NCCL_DEBUG"] == "INFO");
    CHECK(m["NCCL_IB_TOKEN"] == "<redacted>");
    CHECK(m["NCCLWATCH_API_KEY"] == "<redacted>");
    CHECK(m["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(m["CUDA_VISIBLE_DEVICES"] == "0,1");
}

TEST_CASE("the snapshot redacts by read/redact.h's rule, at capture") {
    char e1[] = "NCCL_IB_PASSWD=hunter2";
    char e2[] = "TORCH_DISTRIBUTED_AUTH=opensesame";
    char e3[] = "NCCLWATCH_COLLECTOR_URL=http://bob:pw123@collector:29610";
    char e4[] = "MASTER_ADDR=node0";
    char e5[] = "NCCL_NET_PWD=pwd-9";
    char e6[] = "TORCH_DISTRIBUTED_INIT_METHOD=tcp://store:29500?token=tok-7&world_size=4";
    char* envp[] = {e1, e2, e3, e4, e5, e6, nullptr};
    EnvList env = snapshot_env(envp);
    std::map<std::string, std::string> m(env.begin(), env.end());
    CHECK(m["NCCL_IB_PASSWD"] == "<redacted>");
    CHECK(m["TORCH_DISTRIBUTED_AUTH"] == "<redacted>");
    CHECK(m["NCCLWATCH_COLLECTOR_URL"] == "http://bob:<redacted>@collector:29610");
    CHECK(m["MASTER_ADDR"] == "node0");
    CHECK(m["NCCL_NET_PWD"] == "<redacted>");
    CHECK(m["TORCH_DISTRIBUTED_INIT_METHOD"] == "tcp://store:29500?token=<redacted>&world_size=4");
}

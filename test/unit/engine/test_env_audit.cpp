// The environment audit on hand-built rank headers and comm slots: differences across ranks, GPUs, variables that do
// nothing (from a scan and from the built-in list), risky combinations.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/env_audit.h"

namespace {

using namespace ncw;
using namespace ncw::audit;

struct Job {
    std::vector<HeaderInfo> headers;
    std::vector<std::vector<CommInfo>> comms;

    // A rank of a healthy job: NCCL 2.28.9, driver 12.8, world size `world`, one communicator on cuda:local.
    HeaderInfo& add(int rank, const std::string& host, int local, int world = 4, std::vector<std::string> env = {}) {
        HeaderInfo h;
        h.minor = 1;
        h.global_rank = rank;
        h.local_rank = local;
        h.world_size = world;
        h.host = host;
        h.pid = 1000 + rank;
        h.nccl_version = 22809;
        h.cuda_driver_version = 12080;
        h.env = {"RANK=" + std::to_string(rank), "MASTER_ADDR=node0", "MASTER_PORT=29500"};
        h.env.insert(h.env.end(), env.begin(), env.end());
        headers.push_back(h);
        CommInfo c;
        c.comm_id = 0xC0;
        c.rank = rank;
        c.nranks = world;
        c.cuda_dev = local;
        c.pci_bus_id = "0000:" + std::to_string(10 + local) + ":00.0";
        comms.push_back({c});
        return headers.back();
    }

    std::vector<Finding> audit() const {
        std::vector<ProcessFacts> facts;
        for (size_t i = 0; i < headers.size(); ++i) facts.push_back({&headers[i], &comms[i]});
        return audit_job(facts);
    }
};

std::vector<Finding> with_topic(const std::vector<Finding>& all, const std::string& topic) {
    std::vector<Finding> out;
    for (const auto& f : all)
        if (f.topic == topic) out.push_back(f);
    return out;
}

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

bool any_evidence(const Finding& f, const std::string& needle) {
    for (const auto& e : f.evidence)
        if (contains(e, needle)) return true;
    return false;
}

// The facts a scan of NCCL 2.28.9 writes, with the given set names found unread.
std::vector<std::string> scanned(const std::string& no_effect) {
    return {"ncclwatch.nccl_library=/site/nvidia/nccl/lib/libnccl.so.2", "ncclwatch.nccl_reads=219",
            "ncclwatch.no_effect=" + no_effect};
}

}  // namespace

TEST_CASE("a consistent job has no findings", "[env_audit]") {
    Job j;
    for (int r = 0; r < 4; ++r) j.add(r, "node0", r, 4, {"NCCL_DEBUG=WARN"});
    CHECK(j.audit().empty());
    CHECK(audit_job({}).empty());
    CHECK(std::string(severity_name(Severity::Error)) == "error");
}

TEST_CASE("differences across ranks name the minority and the majority value", "[env_audit]") {
    Job j;
    for (int r = 0; r < 4; ++r) j.add(r, r < 2 ? "node0" : "node1", r % 2, 4, {"NCCL_ALGO=Ring"});
    j.headers[3].nccl_version = 22703;
    j.headers[2].cuda_driver_version = 12040;
    j.headers[1].world_size = 8;
    j.headers[1].env = {"RANK=1", "MASTER_ADDR=node9", "MASTER_PORT=29500", "NCCL_ALGO=Tree"};
    j.headers[0].env.push_back("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
    const auto all = j.audit();

    const auto versions = with_topic(all, "version_mismatch");
    REQUIRE(versions.size() == 2);
    CHECK(versions[0].severity == Severity::Error);  // NCCL before the driver: most severe first
    CHECK(versions[0].summary ==
          "NCCL version differs across ranks: rank 3 has 2.27.3; the majority (3 of 4) has 2.28.9");
    CHECK(versions[0].ranks == std::vector<int>{3});
    CHECK(any_evidence(versions[0], "NCCL version 2.27.3 on rank 3 (hosts node1)"));
    CHECK(any_evidence(versions[0], "NCCL version 2.28.9 on ranks 0-2 (the majority, 3 of 4)"));
    CHECK(versions[1].severity == Severity::Warning);
    CHECK(contains(versions[1].summary, "CUDA driver version"));
    CHECK(any_evidence(versions[1], "12.4 on rank 2"));

    const auto world = with_topic(all, "world_size_mismatch");
    REQUIRE(world.size() == 1);
    CHECK(world[0].ranks == std::vector<int>{1});

    const auto rdv = with_topic(all, "rendezvous_mismatch");
    REQUIRE(rdv.size() == 1);
    CHECK(contains(rdv[0].summary, "MASTER_ADDR"));
    CHECK(any_evidence(rdv[0], "MASTER_ADDR 'node9' on rank 1"));

    // NCCL_ALGO is a setting every rank must agree on (NCW_MUST_AGREE_SETTINGS): an error, with why.
    const auto setting = with_topic(all, "setting_mismatch");
    REQUIRE(setting.size() == 1);
    CHECK(setting[0].severity == Severity::Error);
    CHECK(contains(setting[0].summary, "NCCL_ALGO"));
    CHECK(setting[0].ranks == std::vector<int>{1});
    CHECK(any_evidence(setting[0], "NCCL_ALGO 'Ring' on ranks 0, 2, 3 (the majority"));
    CHECK(any_evidence(setting[0], "each rank picks every op's algorithm from its own NCCL_ALGO"));
    const auto env = with_topic(all, "env_mismatch");
    REQUIRE(env.size() == 1);
    CHECK(contains(env[0].summary, "TORCH_NCCL_ASYNC_ERROR_HANDLING"));
    CHECK(env[0].ranks == std::vector<int>{0});  // set on one rank only: that rank is the odd one out
    CHECK(any_evidence(env[0], "(unset) on ranks 1-3"));

    // The engine's cheap pass sees the same difference, and only the settings that must agree.
    std::vector<ProcessFacts> facts;
    for (const auto& h : j.headers) facts.push_back(ProcessFacts{&h, nullptr});
    const auto must = must_agree_differences(facts);
    REQUIRE(must.size() == 1);
    CHECK(must[0].topic == "setting_mismatch");
    CHECK(must[0].ranks == std::vector<int>{1});
}

TEST_CASE("ranks without a recorded environment (format 1.0) take no part in variable comparisons", "[env_audit]") {
    Job j;
    for (int r = 0; r < 3; ++r) j.add(r, "node0", r, 3, {"NCCL_DEBUG=INFO"});
    j.headers[2].env.clear();
    j.headers[2].minor = 0;
    CHECK(j.audit().empty());
}

TEST_CASE("two ranks on one GPU of one host", "[env_audit]") {
    Job j;
    j.add(0, "node0", 0, 2);
    j.add(1, "node0", 1, 2);
    j.comms[1][0].cuda_dev = 0;
    j.comms[1][0].pci_bus_id = j.comms[0][0].pci_bus_id;
    const auto all = j.audit();
    const auto dup = with_topic(all, "duplicate_gpu");
    REQUIRE(dup.size() == 1);
    CHECK(dup[0].severity == Severity::Error);
    CHECK(dup[0].ranks == std::vector<int>{0, 1});
    CHECK(contains(dup[0].summary, "ranks 0, 1 use one GPU, GPU 0000:10:00.0 (cuda:0) on host node0"));
    CHECK(contains(dup[0].summary, "Duplicate GPU detected"));
    // And rank 1 is on cuda:0 with LOCAL_RANK 1.
    const auto lr = with_topic(all, "local_rank_device");
    REQUIRE(lr.size() == 1);
    CHECK(lr[0].ranks == std::vector<int>{1});
    CHECK(any_evidence(lr[0], "rank 1 (node0): LOCAL_RANK 1 uses cuda:0"));

    SECTION("the same bus id on two hosts is two GPUs") {
        j.headers[1].host = "node1";
        j.headers[1].local_rank = 0;
        CHECK(with_topic(j.audit(), "duplicate_gpu").empty());
    }
    SECTION("without a bus id, the ordinal under the same CUDA_VISIBLE_DEVICES") {
        j.comms[0][0].pci_bus_id.clear();
        j.comms[1][0].pci_bus_id.clear();
        CHECK(with_topic(j.audit(), "duplicate_gpu").size() == 1);
        j.headers[0].env.push_back("CUDA_VISIBLE_DEVICES=0");
        j.headers[1].env.push_back("CUDA_VISIBLE_DEVICES=1");
        CHECK(with_topic(j.audit(), "duplicate_gpu").empty());
    }
}

TEST_CASE("ranks of one machine with different NCCL_HOSTID are different hosts to NCCL, and may share a GPU",
          "[env_audit]") {
    // The one-GPU multi-rank set-up: every rank on cuda:0 of one machine, each with NCCL_HOSTID=fakehost<LOCAL_RANK>.
    Job j;
    for (int r = 0; r < 4; ++r) {
        j.add(r, "node0", r, 4, {"NCCL_HOSTID=fakehost" + std::to_string(r), "NCCL_SOCKET_IFNAME=lo"});
        j.comms[r][0].cuda_dev = 0;
        j.comms[r][0].pci_bus_id = "0000:10:00.0";
    }
    auto all = j.audit();
    CHECK(with_topic(all, "duplicate_gpu").empty());
    CHECK(with_topic(all, "env_mismatch").empty());  // NCCL_HOSTID names a host: it differs by design
    auto info = with_topic(all, "nccl_hostid");
    REQUIRE(info.size() == 1);  // said once
    CHECK(info[0].severity == Severity::Info);
    CHECK(info[0].ranks == std::vector<int>{0, 1, 2, 3});
    CHECK(contains(info[0].summary, "NCCL sees them as separate hosts"));
    CHECK(contains(info[0].summary, "network transport"));
    CHECK(any_evidence(info[0], "ranks 0-3 on host node0: 4 NCCL hosts by NCCL_HOSTID"));

    SECTION("two ranks with the same NCCL_HOSTID on one GPU are still a duplicate") {
        for (auto& e : j.headers[1].env)
            if (e == "NCCL_HOSTID=fakehost1") e = "NCCL_HOSTID=fakehost0";
        auto dup = with_topic(j.audit(), "duplicate_gpu");
        REQUIRE(dup.size() == 1);
        CHECK(dup[0].ranks == std::vector<int>{0, 1});
    }
    SECTION("one NCCL_HOSTID per machine says nothing") {
        for (int r = 0; r < 4; ++r) {
            j.headers[r].host = "node" + std::to_string(r);
            j.comms[r][0].cuda_dev = r;
        }
        CHECK(with_topic(j.audit(), "nccl_hostid").empty());
    }
}

TEST_CASE("LOCAL_RANK vs the device in use, judged only where every rank sees every device", "[env_audit]") {
    Job j;
    for (int r = 0; r < 2; ++r) j.add(r, "node0", r, 2);
    j.comms[0][0].cuda_dev = 1;  // swapped: no duplicate, but both on the wrong device
    j.comms[0][0].pci_bus_id = "0000:11:00.0";
    j.comms[1][0].cuda_dev = 0;
    j.comms[1][0].pci_bus_id = "0000:10:00.0";
    auto lr = with_topic(j.audit(), "local_rank_device");
    REQUIRE(lr.size() == 1);
    CHECK(lr[0].ranks == std::vector<int>{0, 1});

    SECTION("one device per rank through CUDA_VISIBLE_DEVICES: cuda:0 is right whatever LOCAL_RANK says") {
        j.comms[0][0].cuda_dev = 0;
        j.headers[0].env.push_back("CUDA_VISIBLE_DEVICES=0");
        j.headers[1].env.push_back("CUDA_VISIBLE_DEVICES=1");
        CHECK(with_topic(j.audit(), "local_rank_device").empty());
    }
    SECTION("a shared list of all devices is judged like no list") {
        j.headers[0].env.push_back("CUDA_VISIBLE_DEVICES=0,1");
        j.headers[1].env.push_back("CUDA_VISIBLE_DEVICES=0,1");
        CHECK(with_topic(j.audit(), "local_rank_device").size() == 1);
    }
}

TEST_CASE("variables that do nothing, from the scan", "[env_audit]") {
    Job j;
    for (int r = 0; r < 2; ++r) {
        auto env = scanned(r == 0 ? "NCCL_SOCKET_TIMEOUT,NCCL_ASYNC_ERROR_HANDLING" : "NCCL_SOCKET_TIMEOUT");
        env.push_back("NCCL_SOCKET_TIMEOUT=30");
        if (r == 0) env.push_back("NCCL_ASYNC_ERROR_HANDLING=1");
        env.push_back("NCCL_IB_IFNAME=mlx5_0");  // in the built-in list, but this scan says it is read: trusted
        env.push_back("NCCL_MIN_NRINGS=4");
        j.add(r, "node0", r, 2, env);
    }
    const auto all = j.audit();
    const auto none = with_topic(all, "no_effect");
    REQUIRE(none.size() == 2);
    CHECK(none[0].summary ==
          "NCCL_ASYNC_ERROR_HANDLING has no effect (NCCL 2.28.9 never reads it); the current name is "
          "TORCH_NCCL_ASYNC_ERROR_HANDLING; set on rank 0");
    CHECK(any_evidence(none[0], "source: scan of /site/nvidia/nccl/lib/libnccl.so.2 (219 NCCL_* names, NCCL 2.28.9)"));
    CHECK(none[1].summary == "NCCL_SOCKET_TIMEOUT has no effect (NCCL 2.28.9 never reads it); set on ranks 0, 1");
    CHECK(none[1].ranks == std::vector<int>{0, 1});
    CHECK(any_evidence(none[1], "NCCL_SOCKET_TIMEOUT=30"));

    const auto legacy = with_topic(all, "legacy_name");
    REQUIRE(legacy.size() == 1);
    CHECK(legacy[0].severity == Severity::Info);
    CHECK(contains(legacy[0].summary,
                   "NCCL_MIN_NRINGS is a legacy spelling, still read; the current name is "
                   "NCCL_MIN_NCHANNELS"));
}

TEST_CASE("variables that do nothing, from the built-in list when nothing was scanned", "[env_audit]") {
    Job j;
    j.add(0, "node0", 0, 1,
          {"NCCL_IB_IFNAME=mlx5_0", "NCCL_BLOCKING_WAIT=1", "NCCL_DESYNC_DEBUG=1", "NCCL_TIMEOUT=1800",
           "NCCL_DEBUG=INFO", "ncclwatch.nccl_scan=unknown: 3 names embedded (fewer than 20): built from source"});
    const auto none = with_topic(j.audit(), "no_effect");
    REQUIRE(none.size() == 4);
    CHECK(none[0].summary ==
          "NCCL_BLOCKING_WAIT has no effect (NCCL 2.28.9 never reads it); the current name is "
          "TORCH_NCCL_BLOCKING_WAIT; set on rank 0");
    CHECK(any_evidence(none[0], "source: ncclwatch's built-in list"));
    CHECK(contains(none[1].summary, "NCCL_DESYNC_DEBUG has no effect"));
    CHECK(contains(none[1].summary, "TORCH_NCCL_DESYNC_DEBUG"));
    CHECK(contains(none[2].summary, "NCCL_IB_IFNAME has no effect"));
    CHECK(contains(none[3].summary, "NCCL_TIMEOUT has no effect"));
    CHECK(any_evidence(none[3], "NCCL has no collective timeout"));
}

TEST_CASE("TORCH_NCCL_* variables the loaded libtorch never reads", "[env_audit]") {
    Job j;
    auto env = scanned("");
    env.insert(env.end(),
               {"ncclwatch.torch_library=/site/torch/lib/libtorch_cuda.so", "ncclwatch.torch_reads=85",
                "ncclwatch.torch_no_effect=TORCH_NCCL_FOO", "TORCH_NCCL_FOO=1", "TORCH_NCCL_BLOCKING_WAIT=1"});
    j.add(0, "node0", 0, 1, env);
    const auto none = with_topic(j.audit(), "no_effect");
    REQUIRE(none.size() == 1);
    CHECK(none[0].summary == "TORCH_NCCL_FOO has no effect (the loaded libtorch never reads it); set on rank 0");
    CHECK(any_evidence(none[0], "libtorch_cuda.so (85 TORCH_NCCL_* names)"));
}

TEST_CASE("risky combinations", "[env_audit]") {
    SECTION("NCCL_NET_GDR_LEVEL=2 with NCCL_P2P_DISABLE=1") {
        Job j;
        j.add(0, "node0", 0, 2, {"NCCL_NET_GDR_LEVEL=2", "NCCL_P2P_DISABLE=1"});
        j.add(1, "node0", 1, 2, {"NCCL_NET_GDR_LEVEL=2", "NCCL_P2P_DISABLE=1"});
        const auto f = with_topic(j.audit(), "risky_combination");
        REQUIRE(f.size() == 1);
        CHECK(f[0].ranks == std::vector<int>{0, 1});
        CHECK(contains(f[0].summary, "(ranks 0, 1)"));
    }
    SECTION("NCCL_SOCKET_IFNAME on loopback or a bridge: an error across hosts, fine on one") {
        Job one;
        one.add(0, "node0", 0, 2, {"NCCL_SOCKET_IFNAME=lo"});
        one.add(1, "node0", 1, 2, {"NCCL_SOCKET_IFNAME=lo"});
        CHECK(with_topic(one.audit(), "socket_ifname_local").empty());

        Job two;
        two.add(0, "node0", 0, 2, {"NCCL_SOCKET_IFNAME=docker0"});
        two.add(1, "node1", 0, 2, {"NCCL_SOCKET_IFNAME=docker0"});
        const auto f = with_topic(two.audit(), "socket_ifname_local");
        REQUIRE(f.size() == 1);
        CHECK(f[0].severity == Severity::Error);
        CHECK(contains(f[0].summary, "NCCL_SOCKET_IFNAME=docker0"));
        CHECK(contains(f[0].summary, "2 hosts"));

        Job ok;
        ok.add(0, "node0", 0, 2, {"NCCL_SOCKET_IFNAME=^lo,docker0"});
        ok.add(1, "node1", 0, 2, {"NCCL_SOCKET_IFNAME=eth0,lo"});
        CHECK(with_topic(ok.audit(), "socket_ifname_local").empty());
    }
    SECTION("NCCL_IB_DISABLE=1 across hosts is worth knowing") {
        Job j;
        j.add(0, "node0", 0, 2, {"NCCL_IB_DISABLE=1"});
        j.add(1, "node1", 0, 2, {"NCCL_IB_DISABLE=1"});
        const auto f = with_topic(j.audit(), "ib_disabled");
        REQUIRE(f.size() == 1);
        CHECK(f[0].severity == Severity::Info);
    }
}

TEST_CASE("damaged entries and missing pieces never break the audit", "[env_audit]") {
    Job j;
    j.add(0, "node0", 0, 2, {"=nothing", "NOEQUALS", "ncclwatch.no_effect=NCCL_NOT_SET,,", "ncclwatch.nccl_reads=x"});
    j.add(1, "", -1, -1);
    j.headers[1].global_rank = -1;
    j.comms[1].clear();
    std::vector<ProcessFacts> facts = {{&j.headers[0], &j.comms[0]}, {&j.headers[1], nullptr}, {nullptr, nullptr}};
    const auto all = audit_job(facts);
    CHECK(with_topic(all, "no_effect").empty());  // a listed name that is not set is not reported
}

TEST_CASE("installation variables set by container images are not 'no effect'", "[env_audit]") {
    // NVIDIA's images set NCCL_VERSION; a scan finds it unread, as it should, but nobody meant it as a setting.
    Job j;
    auto env = scanned("NCCL_VERSION,NCCL_SOCKET_TIMEOUT");
    env.push_back("NCCL_VERSION=2.28.3-1");
    env.push_back("NCCL_SOCKET_TIMEOUT=30");
    j.add(0, "node0", 0, 1, env);
    const auto none = with_topic(j.audit(), "no_effect");
    REQUIRE(none.size() == 1);
    CHECK(contains(none[0].summary, "NCCL_SOCKET_TIMEOUT has no effect"));
}

// The live digest client: config of the live variables, and reading the process's own state (file and anonymous
// memory agree). Its endpoint and backoff: test_collector_endpoint.cpp; its frames: test_digest_frame.cpp.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>

#include "shim/base/config.h"
#include "shim/live/digest_client.h"
#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "shim/record/rank_file_writer.h"
#include "temp_dir.h"

using namespace ncw;
using namespace ncw::live_client;

namespace {

Config parse(std::map<std::string, std::string> env, std::vector<std::string>& warnings) {
    return parse_config(
        [&](const char* n) -> const char* {
            auto it = env.find(n);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        warnings);
}

}  // namespace

TEST_CASE("live variables: defaults, valid values, and clear messages for bad ones") {
    std::vector<std::string> w;
    SECTION("defaults") {
        Config c = parse({}, w);
        CHECK(w.empty());
        CHECK(c.collector.empty());
        CHECK(c.collector_port == 29610);
        CHECK(c.token.empty());
        CHECK(c.digest_ms == 200);
        CHECK(c.dead_after_sec == 10);
    }
    SECTION("valid") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "node0:1234"},
                          {"NCCLWATCH_TOKEN", "s3cret"},
                          {"NCCLWATCH_DIGEST_MS", "50"},
                          {"NCCLWATCH_DEAD_AFTER_SEC", "2.5"},
                          {"MASTER_PORT", "29500"}},
                         w);
        CHECK(w.empty());
        CHECK(c.collector == "node0:1234");
        CHECK(c.token == "s3cret");
        CHECK(c.digest_ms == 50);
        CHECK(c.dead_after_sec == 2.5);
        CHECK(c.collector_port == 29501);
    }
    SECTION("auto with an explicit port") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "auto"}, {"NCCLWATCH_COLLECTOR_PORT", "4000"}}, w);
        CHECK(w.empty());
        CHECK(c.collector == "auto");
        CHECK(c.collector_port == 4000);
    }
    SECTION("a bad collector address turns live digests off, saying why") {
        Config c = parse({{"NCCLWATCH_COLLECTOR", "node0"}}, w);
        REQUIRE(w.size() == 1);
        CHECK_THAT(w[0], Catch::Contains("NCCLWATCH_COLLECTOR") && Catch::Contains("no port") &&
                             Catch::Contains("live digests are off"));
        CHECK(c.collector.empty());
    }
    SECTION("out-of-range numbers keep their defaults") {
        Config c = parse(
            {{"NCCLWATCH_DIGEST_MS", "5"}, {"NCCLWATCH_COLLECTOR_PORT", "70000"}, {"NCCLWATCH_DEAD_AFTER_SEC", "x"}},
            w);
        CHECK(w.size() == 3);
        CHECK(c.digest_ms == 200);
        CHECK(c.collector_port == 29610);
        CHECK(c.dead_after_sec == 10);
        CHECK_THAT(w[0] + w[1] + w[2], Catch::Contains("10..10000"));
    }
}

TEST_CASE("the token's value is never recorded in the environment snapshot") {
    std::string var = "NCCLWATCH_TOKEN=s3cret";
    char* envp[] = {var.data(), nullptr};
    EnvList env = snapshot_env(envp);
    REQUIRE(env.size() == 1);
    CHECK(env[0].second == "<redacted>");
}

TEST_CASE("the process's own state reads the same through its file and straight from the mapping") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 3;
    id.world_size = 4;
    id.host = "hostA";
    id.pid = getpid();
    id.job_id = "job1";
    RankFileWriter w = create_rank_file(dir.path.string(), id, 256, 0);
    REQUIRE(w.file_backed);
    w.hdr->num_comms.store(2);
    for (int i = 0; i < 2; ++i) {
        disk::CommSlot& s = w.comms[i];
        s.rank = 3;
        s.nranks = 4;
        s.comm_id = 100 + i;
        snprintf(s.name, sizeof s.name, "comm%d", i);
        s.state.store(uint32_t(disk::CommState::Active));
        s.coll_issued.store(70);
        s.coll_completed.store(69);
        for (uint64_t seq = 1; seq <= 70; ++seq) {
            disk::OpSignature& g = s.recent[seq % disk::kRecentSigs];
            g.seq.store(seq);
            g.count = seq * 10;
            g.op = uint8_t(disk::OpType::AllReduce);
        }
    }
    SelfReader from_file(w);
    REQUIRE(from_file.error().empty());
    RankFileWriter anon = w;
    anon.file_backed = false;
    SelfReader from_memory(anon);

    std::vector<uint8_t> a, b;
    wire::encode(make_digest(from_file.header(), from_file.comms(), 0), a);
    wire::encode(make_digest(from_memory.header(), from_memory.comms(), 0), b);
    CHECK(a == b);
    wire::Digest d;
    REQUIRE(wire::decode(a.data() + wire::kHeaderBytes, a.size() - wire::kHeaderBytes, d, nullptr));
    REQUIRE(d.comms.size() == 2);
    CHECK(d.comms[1].name == "comm1");
    CHECK(d.comms[1].recent.back().seq == 70);

    wire::Hello ha, hb;
    ha.header = from_file.header();
    hb.header = from_memory.header();
    a.clear();
    b.clear();
    wire::encode(ha, a);
    wire::encode(hb, b);
    CHECK(a == b);
    CHECK(ha.header.global_rank == 3);
    CHECK(ha.header.host == "hostA");
}

TEST_CASE("the digest carries the communicators without a comm slot, read from our memory; a destroyed one drops out") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 0;
    id.world_size = 2;
    id.pid = getpid();
    id.job_id = "job2";
    RankFileWriter w = create_rank_file(dir.path.string(), id, 256, 0);
    REQUIRE(w.file_backed);
    w.hdr->num_comms.store(1);
    w.comms[0].comm_id = 7;
    w.comms[0].nranks = 2;
    w.comms[0].state.store(uint32_t(disk::CommState::Active));

    auto slots = std::make_unique<SlotTable>();
    std::vector<CommRuntime*> own;
    for (int i = 0; i < 3; ++i) {
        auto* cr = new CommRuntime;  // leaked, as in the shim
        auto* s = new disk::CommSlot();
        s->comm_id = 300 - uint64_t(i);  // out of order: the digest sorts them by id
        s->rank = 0;
        s->nranks = 2;
        s->state.store(uint32_t(disk::CommState::Active));
        s->coll_issued.store(5);
        s->coll_completed.store(4);
        for (uint64_t seq = 1; seq <= 5; ++seq) {
            disk::OpSignature& g = s->recent[seq % disk::kRecentSigs];
            g.count = seq;
            g.op = uint8_t(disk::OpType::AllReduce);
            g.seq.store(seq);
        }
        cr->slot.store(s);
        cr->slot_index = 0xffff;
        REQUIRE(slots->add_unslotted(cr));
        own.push_back(cr);
    }
    // One in the middle of a signature's rewrite (seq 0 while it changes): that entry is left out, the rest stay.
    own[0]->slot.load()->recent[5 % disk::kRecentSigs].seq.store(0);

    SelfReader r(w, slots.get());
    std::vector<CommInfo> c = r.comms();
    REQUIRE(c.size() == 4);
    CHECK(c[0].comm_id == 7);
    CHECK(c[0].slot == 0);
    CHECK(c[1].comm_id == 298);
    CHECK(c[3].comm_id == 300);
    for (size_t i = 1; i < 4; ++i) {
        CHECK(c[i].slot == kNoCommSlot);
        CHECK(c[i].coll_issued == 5);
        CHECK(c[i].coll_completed == 4);
    }
    CHECK(c[3].recent.size() == 4);
    CHECK(c[2].recent.size() == 5);
    CHECK(c[2].recent.back().seq == 5);

    own[1]->destroyed.store(true);
    CHECK(r.comms().size() == 3);
    // Its entry is taken by the next communicator without a slot.
    auto* next = new CommRuntime;
    auto* ns = new disk::CommSlot();
    ns->comm_id = 400;
    next->slot.store(ns);
    REQUIRE(slots->add_unslotted(next));
    c = r.comms();
    REQUIRE(c.size() == 4);
    CHECK(c.back().comm_id == 400);
    // Without the slot table (the file alone), only the file's slot.
    CHECK(SelfReader(w).comms().size() == 1);
}

// The one voice of a verdict: the headline names the odd rank's actual op, and the shim's log lines, its
// .report.json and the live report say the same headline as `analyze`.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "report/analysis_json.h"
#include "report/headline.h"

namespace {

using namespace ncw;
using disk::OpType;

verdict::OpSig sig(uint64_t seq, OpType op, int32_t root = -1) {
    verdict::OpSig s;
    s.seq = seq;
    s.op = uint8_t(op);
    s.dtype = 7;  // float32
    s.count = 1048576;
    s.root = root;
    return s;
}

// A 4-rank world on node0 (rank r: pid 100 + r, GPU r), each rank's counts and signatures filled by history(r, s),
// with the mismatches the engine finds in it.
template <class History>
JobResult four_rank_job(const char* job_id, History&& history) {
    JobResult job;
    job.job_id = job_id;
    CommResult c;
    c.job_id = job.job_id;
    c.comm_id = c.view.comm_id = 0xAB;
    c.view.nranks = 4;
    for (int r = 0; r < 4; ++r) {
        verdict::RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.host = "node0";
        s.pid = 100 + r;
        s.cuda_dev = r;
        history(r, s);
        c.view.ranks.push_back(s);
    }
    c.verdicts = verdict::find_mismatches(c.view);
    job.comms.push_back(c);
    return job;
}

// Every rank completed #42, and rank 3 issued `odd` at #42 where the others issued AllReduce.
JobResult mismatch_job(OpType odd) {
    return four_rank_job("job-m", [&](int r, verdict::RankCommState& s) {
        s.issued = s.reached = s.completed = 42;
        s.recent.push_back(r == 3 ? sig(42, odd, odd == OpType::AllReduce ? -1 : 0) : sig(42, OpType::AllReduce));
        if (r == 3 && odd == OpType::AllReduce) s.recent.mut().back().count = 7;
    });
}

// The headline of the one mismatch of mismatch_job(odd).
std::string mismatch_headline(OpType odd) {
    const JobResult job = mismatch_job(odd);
    const CommResult& c = job.comms[0];
    REQUIRE(c.verdicts.size() == 1);
    return report::verdict_headline(job, c, c.verdicts[0]);
}

}  // namespace

TEST_CASE("a mismatch headline names the odd rank's actual op") {
    CHECK(mismatch_headline(OpType::Broadcast) ==
          "rank 3 (host node0, GPU 3, pid 103) issued Broadcast where the other ranks issued AllReduce at #42 on "
          "communicator 0x00000000000000ab (world, 4 ranks) (NCCL may complete it silently and corrupt data)");
    // The same op in another count or dtype: "a different" op, as before.
    CHECK(mismatch_headline(OpType::AllReduce) ==
          "rank 3 (host node0, GPU 3, pid 103) issued a different AllReduce than the other ranks at #42 on "
          "communicator 0x00000000000000ab (world, 4 ranks) (NCCL may complete it silently and corrupt data)");
}

TEST_CASE("the log lines and the report JSON carry the same headline") {
    const JobResult job = mismatch_job(OpType::Broadcast);
    const CommResult& c = job.comms[0];
    const verdict::Verdict& v = c.verdicts[0];
    const std::string h = report::verdict_headline(job, c, v);
    const auto lines = report::verdict_lines(job, c, v);
    REQUIRE(lines.size() == 2 + v.evidence.size());
    CHECK(lines[0] == "MISMATCH: " + h);
    CHECK(lines[1] == v.summary);
    CHECK(lines[2] == v.evidence[0]);
    const auto j = report::verdict_json_with_headline(job, c, v);
    CHECK(j["headline"] == h);
    CHECK(j["summary"] == v.summary);
    CHECK(j["kind"] == "MISMATCH");
    CHECK(j["job_id"] == "job-m");
}

TEST_CASE("every verdict kind has a name, a meaning, an importance of its own and a headline") {
    const JobResult job = mismatch_job(OpType::Broadcast);
    const CommResult& c = job.comms[0];
    std::set<std::string> names, headlines;
    std::set<int> importance;
    size_t kinds = 0;
#define NCW_KIND_CHECK(id, name, imp, meaning)                                                             \
    {                                                                                                      \
        verdict::Verdict v = c.verdicts[0];                                                                \
        v.kind = verdict::Kind::id;                                                                        \
        CHECK(std::string(verdict::kind_name(v.kind)) == name);                                            \
        CHECK(!std::string(verdict::kind_meaning(v.kind)).empty());                                        \
        CHECK(verdict_importance(v.kind) == imp);                                                          \
        names.insert(name), importance.insert(imp), headlines.insert(report::verdict_headline(job, c, v)); \
        ++kinds;                                                                                           \
    }
    NCW_VERDICT_KINDS(NCW_KIND_CHECK)
#undef NCW_KIND_CHECK
    CHECK(kinds == 14);
    CHECK(names.size() == kinds);
    CHECK(importance.size() == kinds);
    CHECK(headlines.size() == kinds);
}

TEST_CASE("a drift leads with the skip in one voice, its MISMATCHes say they are consequences") {
    // 4 ranks; a broadcast every 10th op; rank 3 skipped one all_reduce after #10: its #19.. are the others' #20..
    JobResult job = four_rank_job("job-d", [](int r, verdict::RankCommState& s) {
        const uint64_t n = r == 3 ? 32 : 33;
        s.issued = s.reached = s.completed = n;
        for (uint64_t q = 1; q <= n; ++q) {
            const uint64_t as = r == 3 && q >= 15 ? q + 1 : q;  // the others' op it stands for
            s.recent.push_back(as % 10 == 0 ? sig(q, OpType::Broadcast, 0) : sig(q, OpType::AllReduce));
        }
    });
    const CommResult& cr = job.comms[0];
    Analysis a;
    a.jobs.push_back(job);
    const auto lead = report::lead_verdict(a);
    REQUIRE(lead.verdict);
    CHECK(lead.verdict->kind == verdict::Kind::NotJoined);
    CHECK(report::verdict_headline(*lead.job, *lead.comm, *lead.verdict) ==
          "rank 3 (host node0, GPU 3, pid 103) skipped one AllReduce between #11 and #19 on communicator "
          "0x00000000000000ab (world, 4 ranks): its #19..#32 are the others' #20..#33, which NCCL paired silently");
    size_t consequences = 0;
    for (const auto& v : cr.verdicts)
        if (v.kind == verdict::Kind::Mismatch) {
            ++consequences;
            CHECK(report::verdict_headline(job, cr, v)
                      .find("(a consequence, not the cause: rank 3 skipped one AllReduce between #11 and #19)") !=
                  std::string::npos);
        }
    CHECK(consequences == 4);
    // The JSON says the same, and marks which is which.
    const auto j = report::verdict_json_with_headline(job, cr, *lead.verdict);
    CHECK(j["drift"]["shift"] == 1);
    CHECK(j["drift"]["first_seq"] == 11);
    CHECK(j["headline"] == report::verdict_headline(job, cr, *lead.verdict));
    CHECK_FALSE(j.contains("consequence"));
}

TEST_CASE("a rank with no file is named by its global rank where the communicator is the job's world") {
    // Ranks 0-2 of a world of 4 entered init; rank 3 never created its file.
    Analysis a;
    JobResult job;
    job.job_id = "job-i";
    CommResult c;
    c.job_id = job.job_id;
    c.comm_id = c.view.comm_id = 0xCD;
    c.view.nranks = 4;
    c.missing = {3};
    for (int r = 0; r < 3; ++r) {
        verdict::RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.world_size = 4;
        s.host = "node0";
        s.pid = 100 + r;
        c.view.ranks.push_back(s);
    }
    verdict::Verdict v;
    v.kind = verdict::Kind::InitHang;
    v.comm_id = 0xCD;
    v.culprits = {3};
    v.missing = {3};
    c.verdicts = {v};
    job.comms = {c};
    a.jobs = {job};
    const auto culprit = [&] { return report::analysis_json(a, 10)["verdicts"][0]["culprits"][0]; };

    CHECK(report::verdict_headline(a.jobs[0], a.jobs[0].comms[0], v).find("rank 3 (no rank file here)") !=
          std::string::npos);
    CHECK(culprit()["global_rank"] == 3);
    CHECK(culprit()["visible"] == false);

    // A split of the world: its comm rank 3 is not global rank 3.
    a.jobs[0].comms[0].parent_id = 0xAB;
    CHECK(report::verdict_headline(a.jobs[0], a.jobs[0].comms[0], v).find("comm rank 3 (no rank file here)") !=
          std::string::npos);
    CHECK(culprit()["global_rank"].is_null());
    // Nor a world whose ranks did not record WORLD_SIZE as its size.
    a.jobs[0].comms[0].parent_id = 0;
    for (auto& s : a.jobs[0].comms[0].view.ranks) s.world_size = 8;
    CHECK(culprit()["global_rank"].is_null());
}

// What a page names (/metrics' ncclwatch_stall_culprit_info, docs/monitoring/alerts.yml): the culprits of the
// communicator's lead verdict, their hosts and the op, short and bounded.
TEST_CASE("culprit_verdict and culprit_labels: who holds a communicator up, where, in which op") {
    JobResult job = mismatch_job(OpType::Broadcast);
    CommResult& c = job.comms[0];
    for (int r = 0; r < 4; ++r) c.view.ranks[size_t(r)].host = r < 2 ? "node-a" : "node\"b";
    REQUIRE(c.verdicts.size() == 1);
    // A mismatch alone: its culprit.
    const verdict::Verdict* v = report::culprit_verdict(c);
    REQUIRE(v == &c.verdicts[0]);
    report::CulpritLabels l = report::culprit_labels(job, c, *v);
    CHECK(l.ranks == "3");
    CHECK(l.hosts == "node\"b");  // as the host is; /metrics escapes it
    CHECK(l.op == "AllReduce #42");

    // A stall comes before the mismatch; a straggler, a suspicion and a verdict naming nobody never lead.
    verdict::Verdict stall;
    stall.kind = verdict::Kind::NotJoined;
    stall.comm_id = c.comm_id;
    stall.seq = 43;
    stall.op = sig(43, OpType::AllGather);
    stall.culprits = {1, 2};
    stall.waiting = {0, 3};
    stall.stalled_for_s = 30;
    verdict::Verdict straggler = stall, suspected = stall, nobody = stall;
    straggler.kind = verdict::Kind::Straggler;
    suspected.suspected = true;
    nobody.kind = verdict::Kind::StuckInNccl;
    nobody.culprits.clear();
    c.verdicts.insert(c.verdicts.begin(), {straggler, suspected, nobody});
    CHECK(report::culprit_verdict(c) == &c.verdicts[3]);  // still the mismatch
    c.verdicts.push_back(stall);
    REQUIRE(report::culprit_verdict(c) == &c.verdicts.back());
    l = report::culprit_labels(job, c, c.verdicts.back());
    CHECK(l.ranks == "1,2");
    CHECK(l.hosts == "node-a,node\"b");
    CHECK(l.op == "AllGather #43");
    // A consequence does not lead its cause.
    c.verdicts.back().consequence = true;
    CHECK(report::culprit_verdict(c) == &c.verdicts[3]);

    // Nothing to name.
    CommResult none = c;
    none.verdicts = {nobody, straggler};
    CHECK(report::culprit_verdict(none) == nullptr);
}

TEST_CASE("culprit_labels stays short: at most 8 ranks and 4 hosts, then how many more") {
    JobResult job;
    job.job_id = "big";
    CommResult c;
    c.comm_id = c.view.comm_id = 0xB1;
    c.view.nranks = 64;
    verdict::Verdict v;
    v.kind = verdict::Kind::Dead;
    v.seq = 7;
    for (int r = 0; r < 64; ++r) {
        verdict::RankCommState s;
        s.comm_rank = r;
        s.global_rank = 100 + r;
        s.host = "h" + std::to_string(r);
        c.view.ranks.push_back(s);
        if (r % 2) v.culprits.push_back(r);  // 32 culprits on 32 hosts
    }
    const report::CulpritLabels l = report::culprit_labels(job, c, v);
    CHECK(l.ranks == "101,103,105,107,109,111,113,115 and 24 more");
    CHECK(l.hosts == "h1,h3,h5,h7 and 28 more");
    CHECK(l.op == "#7");  // no signature recorded: the number alone
    // A culprit without a rank file and a global rank not known: comm ranks, said so.
    v.culprits = {1, 70};
    c.view.nranks = 80;
    c.parent_id = 0x1;  // a split: its comm ranks are not the job's global ranks
    const report::CulpritLabels m = report::culprit_labels(job, c, v);
    CHECK(m.ranks == "comm 1,70");
    CHECK(m.hosts == "h1,?");
}

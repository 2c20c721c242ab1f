// The story after the end (report/story.h): the shims' events paired into what recovered, one entry per verdict
// however many ranks reported it; the inits that waited, from the files; hostile documents read as nothing.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "report/story.h"
#include "temp_dir.h"

namespace {

using namespace ncw;
using json = nlohmann::json;

// A verdict as the shim's report writes it (headline.h verdict_json_with_headline), with what the story reads.
json verdict_doc(const std::string& kind, const char* role, const char* comm, uint64_t seq, int culprit, int global,
                 const char* where) {
    return json{{"kind", kind},
                {"role", role},
                {"comm_id", comm},
                {"seq", seq},
                {"op", {{"op", "AllReduce"}}},
                {"culprits", {culprit}},
                {"headline", "rank " + std::to_string(global) + " never issued AllReduce"},
                {"culprits_where",
                 {{{"comm_rank", culprit}, {"global_rank", global}, {"python_where", where ? json(where) : json()}}}}};
}

json report_doc(const std::string& job, json events) {
    return json{{"schema", "ncclwatch.report/1"}, {"process", {{"job_id", job}}}, {"events", std::move(events)}};
}

json stall(const char* comm, const char* time, json verdicts) {
    return json{{"type", "stall"}, {"comm_id", comm}, {"time", time}, {"verdicts", std::move(verdicts)}};
}

json recovered(const char* comm, double s) {
    return json{{"type", "recovered"}, {"comm_id", comm}, {"stalled_for_s", s}, {"suspected_only", false}};
}

TEST_CASE("a stall that recovered is told once, with the culprit's frame of that moment and the longest wait") {
    const char* dp = "0x00000000000000aa";
    const char* tp = "0x00000000000000bb";
    // Rank 0 waited in DP, whose stall cascades from TP's (its event lists TP's initiating verdict first); rank 1
    // waited in TP itself, a little longer.
    const json lead = verdict_doc("NOT_JOINED", "initiating", tp, 11, 1, 5, "slow_eval (grid.py:14)");
    std::vector<report::ReportDoc> docs = {
        {"r0.report.json", report_doc("J", {stall(dp, "2026-12-03T10:00:02.000+00:00",
                                                  {lead, verdict_doc("NOT_JOINED", "cascade", dp, 11, 1, 5, nullptr)}),
                                            recovered(dp, 19.1)})},
        {"r1.report.json", report_doc("J", {stall(tp, "2026-12-03T10:00:01.500+00:00", {lead}), recovered(tp, 19.6)})},
    };
    std::vector<std::string> warnings;
    const auto story = report::build_story(Analysis{}, docs, &warnings);
    REQUIRE(story.size() == 1);
    CHECK(story[0].kind == report::StoryEntry::Kind::Recovered);
    CHECK(story[0].comm_id == 0xbb);
    CHECK(story[0].seq == 11);
    CHECK(story[0].time == "2026-12-03T10:00:01.500+00:00");
    CHECK(story[0].line == "recovered: rank 5 held AllReduce #11 for 19.6 s in slow_eval (grid.py:14)");
    CHECK(report::story_headline(story) == story[0].line + "; nothing is hung at the end");
    CHECK(warnings.empty());
    const json j = report::story_json(story);
    CHECK(j[0]["kind"] == "recovered");
    CHECK(j[0]["verdict"]["kind"] == "NOT_JOINED");
}

TEST_CASE(
    "a suspicion that came to nothing, and a stall that ended by an error or never ended, are told as they were") {
    const char* c = "0x00000000000000cc";
    json suspected{{"type", "suspected"},
                   {"comm_id", c},
                   {"time", "t1"},
                   {"waiting_in_seq", 7},
                   {"verdicts", {verdict_doc("NOT_JOINED", "initiating", c, 7, 2, 2, nullptr)}}};
    json cleared{{"type", "recovered"}, {"comm_id", c}, {"stalled_for_s", 3.2}, {"suspected_only", true}};
    json ended{{"type", "ended_by_error"}, {"comm_id", c}, {"stalled_for_s", 9.0}};
    std::vector<report::ReportDoc> docs = {
        {"a", report_doc("J", {suspected, cleared})},
        // A stall that an error ended, and one still open at the end: the rank files tell how they stand.
        {"b", report_doc("J", {stall(c, "t2", {verdict_doc("NOT_JOINED", "initiating", c, 9, 2, 2, nullptr)}), ended})},
        {"c", report_doc("J", {stall(c, "t3", {verdict_doc("NOT_JOINED", "initiating", c, 12, 2, 2, nullptr)})})},
    };
    const auto story = report::build_story(Analysis{}, docs, nullptr);
    REQUIRE(story.size() == 1);
    CHECK(story[0].kind == report::StoryEntry::Kind::SuspicionCleared);
    CHECK(story[0].line == "suspected, then recovered: rank 2 held AllReduce #7 for 3.2 s");
}

TEST_CASE("an init that waited past the ranks' timeout and finished names the rank that began late") {
    Analysis a;
    JobResult j;
    j.job_id = "J";
    j.now_mono_ns = 100'000'000'000ull;
    j.now_real_ns = 1'800'000'000'000'000'000ull;
    CommResult c;
    c.job_id = "J";
    c.comm_id = c.view.comm_id = 0x1234;
    c.view.nranks = 4;
    for (int r = 0; r < 4; ++r) {
        verdict::RankCommState s;
        s.comm_rank = s.global_rank = r;
        s.t_init_start_ns = (r == 3 ? 35'300'000'000ull : 10'000'000'000ull + uint64_t(r) * 100'000'000ull);
        s.t_init_done_ns = 35'400'000'000ull;
        c.view.ranks.push_back(s);
    }
    j.comms.push_back(c);
    a.jobs.push_back(j);
    FileSummary f;
    f.ok = true;
    f.job_id = "J";
    f.timeout_ms = 10000;
    a.files.push_back(f);
    auto story = report::build_story(a, {}, nullptr);
    REQUIRE(story.size() == 1);
    CHECK(story[0].kind == report::StoryEntry::Kind::InitWaited);
    CHECK(story[0].line ==
          "init of communicator 0x0000000000001234 (world, 4 ranks) waited 25.4 s for rank 3, which began its init "
          "25.3 s after the first");
    CHECK_FALSE(story[0].time.empty());

    // Every rank began together and NCCL's init took the time: no rank is blamed.
    for (auto& s : a.jobs[0].comms[0].view.ranks) s.t_init_start_ns = 10'000'000'000ull;
    story = report::build_story(a, {}, nullptr);
    REQUIRE(story.size() == 1);
    CHECK_THAT(story[0].line, Catch::Contains("took 25.4 s inside NCCL (every rank began it within 0.0 s"));

    // Under the timeout: nothing to tell; one rank still in its init: it stands, the verdicts say so.
    a.files[0].timeout_ms = 30000;
    CHECK(report::build_story(a, {}, nullptr).empty());
    a.files[0].timeout_ms = 10000;
    a.jobs[0].comms[0].view.ranks[2].t_init_done_ns = 0;
    CHECK(report::build_story(a, {}, nullptr).empty());
}

TEST_CASE("documents of any shape are read as what they say, never a crash") {
    const char* c = "0x00000000000000dd";
    std::vector<report::ReportDoc> docs = {
        {"null", json()},
        {"array", json::array({1, 2})},
        {"events not an array", json{{"schema", "ncclwatch.report/1"}, {"events", 5}}},
        {"odd events", report_doc("J", {1, "x", json::object(), json{{"type", 7}}, json{{"comm_id", "nothex"}},
                                        json{{"type", "recovered"}, {"comm_id", c}}})},
        {"odd verdicts", report_doc("J", {json{{"type", "stall"}, {"comm_id", c}, {"verdicts", {1, json::array()}}},
                                          json{{"type", "recovered"}, {"comm_id", c}, {"stalled_for_s", "long"}}})},
        {"odd culprits",
         report_doc("J", {stall(c, "t", {json{{"seq", -3}, {"op", 4}, {"culprits_where", {{{"global_rank", "x"}}}}}}),
                          recovered(c, 1.0)})},
    };
    std::vector<std::string> warnings;
    const auto story = report::build_story(Analysis{}, docs, &warnings);
    for (const auto& s : story) CHECK_FALSE(s.line.empty());
}

TEST_CASE("the reports beside the rank files are read; a bad one is a warning, a missing one nothing") {
    TempDir dir;
    const std::string good = dir.file("rank0-h-1.ncw"), bad = dir.file("rank1-h-2.ncw"),
                      none = dir.file("rank2-h-3.ncw");
    std::ofstream(dir.file("rank0-h-1.report.json")) << report_doc("J", json::array()).dump();
    std::ofstream(dir.file("rank1-h-2.report.json")) << "{not json";
    REQUIRE(symlink("/etc/passwd", dir.file("rank3-h-4.report.json").c_str()) == 0);
    std::vector<std::string> warnings;
    const auto docs = report::read_report_docs({good, bad, none, dir.file("rank3-h-4.ncw"), "x.bin"}, &warnings);
    REQUIRE(docs.size() == 1);
    CHECK(docs[0].path == dir.file("rank0-h-1.report.json"));
    REQUIRE(warnings.size() == 2);
    CHECK_THAT(warnings[0], Catch::Contains("rank1-h-2.report.json: not a report"));
    CHECK_THAT(warnings[1], Catch::Contains("rank3-h-4.report.json"));

    // Thousands of ranks that each reported: the first 4,096 are read, the rest counted.
    TempDir many;
    std::vector<std::string> files;
    for (int r = 0; r < 4100; ++r) {
        files.push_back(many.file("rank" + std::to_string(r) + "-h-1.ncw"));
        std::ofstream(many.file("rank" + std::to_string(r) + "-h-1.report.json")) << report_doc("J", {}).dump();
    }
    warnings.clear();
    CHECK(report::read_report_docs(files, &warnings).size() == 4096);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0],
               Catch::Contains("told from the first 4096 reports") && Catch::Contains("4 more were not read"));
}

}  // namespace

// The watchdog's events as stderr shows them (report/watch_events.h), quiet by default: the answer first, then at most
// kEvidenceLines of evidence, the most telling first, the rest in `more`; one line where another rank of the node
// prints the full report.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "report/watch_events.h"
#include "verdict_fixtures.h"
#include "watch_fixtures.h"

using namespace verdict_fixtures;
using namespace watch_fixtures;
using ncw::CommResult;
using ncw::JobResult;
namespace report = ncw::report;

namespace {

size_t index_of(const std::vector<std::string>& lines, const std::string& needle) {
    for (size_t i = 0; i < lines.size(); ++i)
        if (contains(lines[i], needle)) return i;
    return lines.size();
}

}  // namespace

TEST_CASE("a stall's full report: the verdict first, at most kEvidenceLines of evidence, the ranks' rows cut first") {
    const JobResult job = eight_rank_stall();
    const CommResult& c = job.comms.front();
    REQUIRE(!c.verdicts.empty());
    REQUIRE(c.verdicts.front().kind == Kind::NotJoined);
    const report::WatchEvent e = report::stall_event(&job, &c, own_of(c, 0));
    // The answer: the culprit and the op, as every report words it.
    REQUIRE(!e.lines.empty());
    CHECK(e.lines.front().rfind("NOT_JOINED: rank 2 ", 0) == 0);
    CHECK(contains(e.lines.front(), "AllReduce #10"));
    // The evidence that fits, with the line that ends it left to the writer (say_more): kEvidenceLines in all.
    CHECK(e.say_more);
    REQUIRE(!e.more.empty());
    CHECK(e.lines.size() <= 1 + report::kEvidenceLines - 1);
    // What it keeps: the account in plain words, this process's stall, the culprit's row; what it cuts: the rows of
    // the ranks that only wait.
    CHECK(index_of(e.lines, "rank 2 is behind") < e.lines.size());
    CHECK(index_of(e.lines, "STALL on communicator") < e.lines.size());
    CHECK(index_of(e.lines, "rank 2 (global 2, host node0, pid 1002): issued #9") < e.lines.size());
    // The rows of the waiting ranks are a table the stderr form cannot hold whole: none of them, not a few.
    for (int r : {0, 1, 3, 4, 5, 6, 7})
        CHECK(index_of(e.lines, fmt::format("rank {} (global {}, host node0, pid {}): issued #10", r, r, 1000 + r)) ==
              e.lines.size());
    CHECK(index_of(e.more, "rank 5 (global 5, host node0, pid 1005): issued #10") < e.more.size());
    // Shown in the report's own order: the account before the evidence, this process's stall after the lead's.
    CHECK(index_of(e.lines, "rank 2 is behind") < index_of(e.lines, "STALL on communicator"));
    // Nothing is lost: every line of the evidence is shown or in `more`.
    for (const std::string& ev : c.verdicts.front().evidence)
        CHECK(index_of(e.lines, ev) + index_of(e.more, ev) < e.lines.size() + e.more.size());
    // The JSON carries the verdicts, and no pointer: this process prints the report.
    CHECK(e.event["verdicts"][0]["kind"] == "NOT_JOINED");
    CHECK(e.event["full_report"].is_null());
}

TEST_CASE("another rank of the node prints the full report: one line, the verdict and where the report is") {
    const JobResult job = eight_rank_stall();
    const CommResult& c = job.comms.front();
    const report::WatchEvent e = report::stall_event(
        &job, &c, own_of(c, 3), report::Elsewhere{0, 1000, "/tmp/ncw/job-q/rank0-node0-1000.report.json"});
    REQUIRE(e.lines.size() == 1);
    CHECK(e.lines.front().rfind("NOT_JOINED: rank 2 ", 0) == 0);
    CHECK(contains(e.lines.front(),
                   "[the full report: local rank 0 (pid 1000) on this host, in its stderr and "
                   "/tmp/ncw/job-q/rank0-node0-1000.report.json]"));
    CHECK_FALSE(e.say_more);  // the line says where the rest is
    CHECK(index_of(e.more, "STALL on communicator") < e.more.size());
    CHECK(e.event["full_report"]["local_rank"] == 0);
    CHECK(e.event["full_report"]["pid"] == 1000);
    CHECK(e.event["full_report"]["report_json"] == "/tmp/ncw/job-q/rank0-node0-1000.report.json");

    report::Elsewhere here;
    here.printed_here = true;
    const report::WatchEvent again = report::stall_event(&job, &c, own_of(c, 0), here);
    REQUIRE(again.lines.size() == 1);
    CHECK(contains(again.lines.front(), "[printed in full above by this process]"));
    CHECK(again.event["full_report"].is_null());
}

TEST_CASE("the live collector's verdict leads where this node's files cannot name the culprit") {
    const JobResult job = eight_rank_stall();
    const CommResult& c = job.comms.front();
    report::OwnStall own = own_of(c, 0);
    own.job_verdict = "NOT_JOINED: rank 9 (host node1, GPU 1, pid 77) never issued AllReduce #10";
    const report::WatchEvent e = report::stall_event(&job, &c, own);
    REQUIRE(!e.lines.empty());
    CHECK(e.lines.front() == own.job_verdict + " [the job's verdict, from the live collector]");
    CHECK(e.lines.size() <= 1 + report::kEvidenceLines);
}

TEST_CASE("a stall without a verdict leads with the stall itself") {
    JobResult job = eight_rank_stall();
    CommResult& c = job.comms.front();
    c.verdicts.clear();
    const report::WatchEvent e = report::stall_event(&job, &c, own_of(c, 0));
    REQUIRE(e.lines.size() == 2);
    CHECK(e.lines.front().rfind("STALL on communicator ", 0) == 0);
    CHECK(contains(e.lines[1], "no verdict: every rank of the communicator is visible in /tmp/ncw/job-q"));
    CHECK(e.more.empty());
}

TEST_CASE("the lines that close an event and say a node's dumps") {
    CHECK(report::more_lines_note(7, "/d/rank0-h-1.report.json") ==
          "  7 more lines in /d/rank0-h-1.report.json (NCCLWATCH_LOG_LEVEL=debug prints them here)");
    CHECK(report::node_dumps_line("stall", 8, 8, "/d/rank*-h-*.dump.json", {}) ==
          "dumps written (stall): all 8 ranks of this host, /d/rank*-h-*.dump.json");
    CHECK(report::node_dumps_line("stall", 6, 8, "/d/rank*-h-*.dump.json", {3, 5}) ==
          "dumps written (stall): 6 of this host's 8 ranks, /d/rank*-h-*.dump.json (ranks 3,5 wrote none yet)");
}

// What one process says on stderr over a job (report/stderr_budget.h): a verdict once, a suspicion one line once, at
// most kJobLines lines however the story unfolds, the final verdict's answer always said.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "report/headline.h"
#include "report/stderr_budget.h"
#include "report/watch_events.h"
#include "verdict_fixtures.h"
#include "watch_fixtures.h"

using namespace verdict_fixtures;
using namespace watch_fixtures;
using ncw::CommResult;
using ncw::JobResult;
namespace report = ncw::report;

namespace {

// The lines the writer prints: the event's, and the note that says where the rest is.
size_t printed(const report::WatchEvent& e) { return e.lines.size() + (e.say_more && !e.more.empty() ? 1 : 0); }

}  // namespace

TEST_CASE("verdict_key: one verdict whatever carries it and however long it has waited") {
    const std::string said =
        "NOT_JOINED: rank 2 (host h, GPU 0, pid 12) never issued AllReduce #10 on communicator 0x1 (world, 8 ranks); "
        "7 ranks wait in it since 2026-12-07T22:11:35.254+00:00: rank 2 is in validate (train.py:48)";
    const std::string key = report::verdict_key(said);
    CHECK(key ==
          "NOT_JOINED: rank 2 (host h, GPU 0, pid 12) never issued AllReduce #10 on communicator 0x1 (world, 8 "
          "ranks)");
    CHECK(report::verdict_key("FINAL (SIGTERM): " + said) == key);
    CHECK(report::verdict_key("JOB VERDICT (live collector): " + said) == key);
    CHECK(report::verdict_key("SUSPECTED " + said + " [no completion for 5.1 s]") == key);
    CHECK(report::verdict_key("  " + said) == key);
    // A teardown's wait, a watchdog's: the seconds are not the verdict.
    CHECK(report::verdict_key("TEARDOWN_HANG: ranks 0-3 (4 ranks on 1 host) have been inside the teardown of "
                              "communicator 0x2 (world, 4 ranks) for 10.3 s since 2026-12-07T22:11:36.093+00:00") ==
          report::verdict_key("TEARDOWN_HANG: ranks 0-3 (4 ranks on 1 host) have been inside the teardown of "
                              "communicator 0x2 (world, 4 ranks) for 59.8 s since 2026-12-07T22:11:36.122+00:00"));
    CHECK(report::verdict_key("FAILED: torch's NCCL watchdog ended rank 1 (host h, GPU 0, pid 3) after AllReduce #16 "
                              "on communicator 0x2 (world, 4 ranks) had waited 20.1 s: the timeout") ==
          report::verdict_key("FAILED: torch's NCCL watchdog ended rank 1 (host h, GPU 0, pid 3) after AllReduce #16 "
                              "on communicator 0x2 (world, 4 ranks) had waited 20.2 s: the timeout"));
    // Another op, another culprit, another kind: another verdict.
    CHECK(report::verdict_key(said) != report::verdict_key("NOT_JOINED: rank 2 (host h, GPU 0, pid 12) never issued "
                                                           "AllReduce #11 on communicator 0x1 (world, 8 ranks)"));
    CHECK(report::verdict_key(said) != report::verdict_key("DEAD: rank 2 (host h, GPU 0, pid 12) never issued "
                                                           "AllReduce #10 on communicator 0x1 (world, 8 ranks)"));
    // No verdict stated.
    CHECK(report::verdict_key("STALL on communicator 0x1 (8 ranks; this process is rank 0): no completion").empty());
    CHECK(report::verdict_key("RECOVERED: communicator 0x1 made progress again after 20.1 s").empty());
    CHECK(report::verdict_key("FINAL (SIGTERM): no stall and no rank gone before this one").empty());
}

TEST_CASE("a whole story at 8 ranks fits kJobLines: suspicion, stall, collector, dumps, recovery, a new final") {
    report::StderrBudget budget;
    // The suspicion names the verdict the stall will have (engine/suspicion.h judges it early).
    JobResult early = eight_rank_stall(12.0);
    early.comms.front().suspected = early.comms.front().verdicts;
    REQUIRE_FALSE(early.comms.front().suspected.empty());
    const JobResult job = eight_rank_stall(12.0);
    const CommResult& c = job.comms.front();
    size_t lines = 0;

    // The suspicion: one line, said.
    report::WatchEvent sus = report::suspected_event(&early, &early.comms.front(), own_of(c, 0, 4.0), 4.0, 1000000);
    REQUIRE(budget.shape(sus));
    CHECK(sus.lines.size() == 1);
    lines += printed(sus);

    // The stall: the verdict, said in full as far as it leaves the reserve.
    report::WatchEvent stall = report::stall_event(&job, &c, own_of(c, 0, 12.0));
    const std::string answer = stall.lines.front();
    REQUIRE(budget.shape(stall));
    CHECK(stall.lines.front() == answer);
    CHECK(printed(stall) >= 2);
    lines += printed(stall);
    CHECK(lines + report::kReserve <= report::kJobLines);

    // The suspicion again, the stall again (another rank's reading a moment later), the collector's same verdict:
    // nothing more.
    report::WatchEvent sus2 = report::suspected_event(&early, &early.comms.front(), own_of(c, 0, 4.5), 4.0, 1000000);
    CHECK_FALSE(budget.shape(sus2));
    // One that names no verdict: once per communicator.
    report::WatchEvent bare = report::suspected_event(nullptr, nullptr, own_of(c, 0, 4.0), 4.0, 1000000);
    REQUIRE(budget.shape(bare));
    ++lines;
    report::WatchEvent bare2 = report::suspected_event(nullptr, nullptr, own_of(c, 0, 5.0), 4.0, 1000000);
    CHECK_FALSE(budget.shape(bare2));
    report::WatchEvent stall2 = report::stall_event(&job, &c, own_of(c, 0, 13.0));
    CHECK_FALSE(budget.shape(stall2));
    const std::string verdict_line = ncw::report::verdict_lines(job, c, c.verdicts.front()).front();
    report::WatchEvent collector = report::collector_verdict_event(verdict_line);
    CHECK_FALSE(budget.shape(collector));

    // The node's dumps: only where they leave the reserve; the recovery: said.
    if (budget.take_note_line()) ++lines;
    report::WatchEvent rec = report::recovered_event(kComm, 20.1, false, false);
    REQUIRE(budget.shape(rec));
    lines += printed(rec);

    // A new verdict at the end (another kind): its answer at least, and the total within kJobLines.
    JobResult dead = eight_rank_stall(30.0);
    dead.comms.front().verdicts.clear();
    ncw::verdict::Verdict v = job.comms.front().verdicts.front();
    v.kind = ncw::verdict::Kind::Dead;
    dead.comms.front().verdicts.push_back(v);
    report::WatchEvent fin = report::final_event("SIGTERM", &dead, {&dead.comms.front()});
    REQUIRE(budget.shape(fin, true));
    CHECK(fin.lines.front().rfind("FINAL (SIGTERM): DEAD", 0) == 0);
    lines += printed(fin);
    CHECK(lines <= report::kJobLines);
    CHECK(budget.used() == lines);
}

TEST_CASE("the final verdict restates a verdict said before in its one first line") {
    report::StderrBudget budget;
    const JobResult job = eight_rank_stall(12.0);
    const CommResult& c = job.comms.front();
    report::WatchEvent stall = report::stall_event(&job, &c, own_of(c, 0, 12.0));
    REQUIRE(budget.shape(stall));
    const size_t after_stall = budget.used();
    const JobResult later = eight_rank_stall(60.0);
    report::WatchEvent fin = report::final_event("SIGTERM", &later, {&later.comms.front()});
    REQUIRE(budget.shape(fin, true));
    REQUIRE(fin.lines.size() == 1);
    CHECK(fin.lines.front().rfind("FINAL (SIGTERM): NOT_JOINED: rank 2 ", 0) == 0);
    CHECK_FALSE(fin.more.empty());  // the rest in the report file
    CHECK(budget.used() == after_stall + 1);
}

TEST_CASE("new verdicts past the budget still say their answer, and nothing else") {
    report::StderrBudget budget;
    const JobResult job = eight_rank_stall(12.0);
    std::vector<ncw::verdict::Kind> kinds = {ncw::verdict::Kind::NotJoined, ncw::verdict::Kind::Dead,
                                             ncw::verdict::Kind::ExtraOp, ncw::verdict::Kind::Mismatch};
    for (ncw::verdict::Kind k : kinds) {
        JobResult j = job;
        j.comms.front().verdicts.front().kind = k;
        report::WatchEvent e = report::stall_event(&j, &j.comms.front(), own_of(j.comms.front(), 0, 12.0));
        REQUIRE(budget.shape(e));
        CHECK(e.lines.front().find(ncw::verdict::kind_name(k)) != std::string::npos);
        if (budget.used() > report::kJobLines) CHECK(printed(e) == 1);
    }
    CHECK(budget.used() <= report::kJobLines + 2);
}

TEST_CASE("a mismatch said, then the hang it became: said again as the hang, once") {
    report::StderrBudget budget;
    JobResult job = eight_rank_stall(12.0);
    CommResult& c = job.comms.front();
    c.verdicts.front().kind = ncw::verdict::Kind::Mismatch;
    const ncw::verdict::Verdict& v = c.verdicts.front();
    report::WatchEvent mismatch = report::mismatch_event(job, c, v);
    REQUIRE(budget.shape(mismatch));
    report::WatchEvent again = report::mismatch_event(job, c, v);
    CHECK_FALSE(budget.shape(again));  // the next check's reading of the same mismatch
    report::WatchEvent hang = report::stall_event(&job, &c, own_of(c, 0, 12.0));
    REQUIRE(budget.shape(hang));
    CHECK(hang.lines.front().rfind("MISMATCH: ", 0) == 0);
    CHECK(hang.lines.front().find("[it now holds the job up]") != std::string::npos);
    report::WatchEvent hang2 = report::stall_event(&job, &c, own_of(c, 0, 14.0));
    CHECK_FALSE(budget.shape(hang2));
    // The others' lines on the same stderr count: with the node's budget spent, an answer alone.
    report::StderrBudget other;
    report::WatchEvent full = report::stall_event(&job, &c, own_of(c, 0, 12.0));
    REQUIRE(other.shape(full, false, report::kJobLines));
    CHECK(printed(full) == 1);
}

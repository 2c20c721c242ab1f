// The analysis report: the verdict line names the culprit with where it runs, big communicators stay readable, the
// JSON document carries what the schema promises.
#include <time.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "read/text.h"
#include "report/analysis_json.h"
#include "report/headline.h"
#include "report/report_json.h"
#include "report/report_text.h"

namespace {

using namespace ncw;

// A 64-rank world communicator where comm rank 17 never issued #42 and the other 63 wait in it.
Analysis hung_job() {
    Analysis a;
    JobResult job;
    job.job_id = "job-7";
    job.now_real_ns = 1'700'000'100'000000000ull;
    job.now_mono_ns = 5000;
    CommResult c;
    c.job_id = job.job_id;
    c.comm_id = 0xC0;
    c.view.comm_id = 0xC0;
    c.view.nranks = 64;
    verdict::Verdict v;
    v.kind = verdict::Kind::NotJoined;
    v.comm_id = 0xC0;
    v.seq = 42;
    v.culprits = {17};
    v.op.seq = 42;
    v.op.op = uint8_t(disk::OpType::AllReduce);
    v.stalled_for_s = 30;
    v.summary = "comm 0xc0: 63 of 64 ranks wait";
    for (int r = 0; r < 64; ++r) {
        verdict::RankCommState s;
        s.comm_rank = r;
        s.global_rank = r;
        s.host = "h" + std::to_string(r / 8);
        s.pid = 1000 + r;
        s.cuda_dev = r % 8;
        s.file = "f" + std::to_string(r) + ".ncw";
        s.comm_state = uint32_t(disk::CommState::Active);
        s.gpu_tracking = true;
        s.issued = r == 17 ? 41 : 42;
        s.reached = s.issued;
        s.completed = 41;
        c.view.ranks.push_back(s);
        if (r != 17) v.waiting.push_back(r);
        v.evidence.push_back("rank " + std::to_string(r) + " (global " + std::to_string(r) + "): line");
    }
    c.verdicts.push_back(v);
    job.comms.push_back(c);

    // A second communicator that stalls because of the first.
    CommResult sub = c;
    sub.comm_id = sub.view.comm_id = 0xD0;
    sub.parent_id = 0xC0;
    sub.verdicts[0].kind = verdict::Kind::StuckInNccl;
    sub.verdicts[0].comm_id = 0xD0;
    sub.verdicts[0].role = verdict::Role::Cascade;
    sub.verdicts[0].caused_by_comm = 0xC0;
    job.comms.push_back(sub);

    audit::Finding f;
    f.topic = "no_effect";
    f.summary = "NCCL_MIN_NRINGS has no effect";
    job.audit.push_back(f);
    a.jobs.push_back(job);
    a.files.push_back(FileSummary{"broken.ncw", false, "truncated: 100 bytes", "", "", 0, -1});
    a.files_read = 64;
    return a;
}

size_t count_lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("the verdict line names the culprit with host, GPU and pid") {
    const Analysis a = hung_job();
    const std::string h = report::headline(a);
    CHECK(h.rfind("rank 17 (host h2, GPU 1, pid 1017) never issued AllReduce #42 on communicator "
                  "0x00000000000000c0 (world, 64 ranks); 63 ranks wait in it since ",
                  0) == 0);
    const std::string text = report::render_text(a, {});
    CHECK(text.rfind("VERDICT  " + h + "\n", 0) == 0);
}

TEST_CASE("big communicators group identical rows and shorten the evidence") {
    const Analysis a = hung_job();
    const std::string text = report::render_text(a, {});
    CHECK(text.find("0-16,18-63") != std::string::npos);
    CHECK(text.find("8 hosts") != std::string::npos);
    CHECK(text.find("--all-ranks") != std::string::npos);
    CHECK(count_lines(text) < 60);
    report::TextOptions all;
    all.all_ranks = true;
    const std::string full = report::render_text(a, all);
    CHECK(count_lines(full) > 2 * 64);
}

TEST_CASE("Also noticed lists other verdicts with their role, audit findings and unreadable files") {
    const std::string text = report::render_text(hung_job(), {});
    const size_t also = text.find("Also noticed");
    REQUIRE(also != std::string::npos);
    CHECK(text.find("STUCK_IN_NCCL", also) != std::string::npos);
    CHECK(text.find("cascade: waits because of communicator 0x00000000000000c0", also) != std::string::npos);
    CHECK(text.find("NCCL_MIN_NRINGS has no effect", also) != std::string::npos);
    CHECK(text.find("unreadable file: broken.ncw: truncated", also) != std::string::npos);
}

TEST_CASE("colour only when asked") {
    report::TextOptions opt;
    CHECK(report::render_text(hung_job(), opt).find('\x1b') == std::string::npos);
    opt.color = true;
    CHECK(report::render_text(hung_job(), opt).find("\x1b[1;31m") != std::string::npos);
}

TEST_CASE("the JSON document carries culprits with where they run, roles and audit findings") {
    const auto j = report::analysis_json(hung_job(), 2.5);
    CHECK(j["schema"] == "ncclwatch.analysis/2");
    CHECK(j["version"] == 2);
    CHECK(j["problem_found"] == true);
    REQUIRE(j["verdicts"].size() == 2);
    const auto& v = j["verdicts"][0];
    CHECK(v["kind"] == "NOT_JOINED");
    CHECK(v["role"] == "none");
    CHECK(v["culprits"][0]["global_rank"] == 17);
    CHECK(v["culprits"][0]["host"] == "h2");
    CHECK(v["culprits"][0]["gpu"] == 1);
    CHECK(v["culprits"][0]["pid"] == 1017);
    CHECK(v["waiting_count"] == 63);
    CHECK(j["verdicts"][1]["role"] == "cascade");
    CHECK(j["verdicts"][1]["caused_by_comm"] == "0x00000000000000c0");
    CHECK(j["jobs"][0]["audit"][0]["topic"] == "no_effect");
    CHECK(j["files"][0]["ok"] == false);
    CHECK(j["comms"][0]["world"] == true);
    CHECK(j["comms"][1]["world"] == false);
}

TEST_CASE("nothing found says so") {
    Analysis a;
    a.files_read = 2;
    CHECK(report::headline(a).rfind("no hang and no mismatch found", 0) == 0);
    CHECK(report::render_text(a, {}).rfind("OK ", 0) == 0);
}

TEST_CASE("the report leads with the initiating stall, not its cascade") {
    Analysis a = hung_job();
    auto& comms = a.jobs[0].comms;
    // Make the cascade the more important kind: it must still not lead.
    comms[1].verdicts[0].kind = verdict::Kind::Dead;
    comms[0].verdicts[0].role = verdict::Role::Initiating;
    const auto lead = report::lead_verdict(a);
    REQUIRE(lead.verdict != nullptr);
    CHECK(lead.verdict->comm_id == 0xC0);
    CHECK(report::headline(a).find("stalled first") != std::string::npos);
}

TEST_CASE("stragglers alone are not a hang") {
    Analysis a = hung_job();
    for (auto& c : a.jobs[0].comms) c.verdicts[0].kind = verdict::Kind::Straggler;
    CHECK_FALSE(report::hang_or_mismatch(a));
    CHECK(report::analysis_json(a, 0)["problem_found"] == false);
    CHECK(report::headline(a).find("consistently last") != std::string::npos);
}

TEST_CASE("times are RFC 3339 with the zone, in every report (text::rfc3339)") {
    const char* old = getenv("TZ");
    const std::string saved = old ? old : "";
    const uint64_t t = 1796019544618863997ull;  // 2026-11-30 06:19:04.618 UTC
    setenv("TZ", "UTC", 1);
    tzset();
    CHECK(text::rfc3339(t) == "2026-11-30T06:19:04.618+00:00");
    setenv("TZ", "IST-5:30", 1);
    tzset();
    CHECK(text::rfc3339(t) == "2026-11-30T11:49:04.618+05:30");
    setenv("TZ", "EST5", 1);
    tzset();
    CHECK(text::rfc3339(t) == "2026-11-30T01:19:04.618-05:00");
    CHECK(text::rfc3339(0) == "unknown time");
    if (old)
        setenv("TZ", saved.c_str(), 1);
    else
        unsetenv("TZ");
    tzset();
}

TEST_CASE("the header states the timeout the ranks ran with and the analysis's") {
    report::TextOptions opt;
    opt.ranks_timeout = "60 s (NCCLWATCH_TIMEOUT_SEC)";
    const std::string text = report::render_text(hung_job(), opt);
    CHECK(text.find("; the ranks' stall timeout 60 s (NCCLWATCH_TIMEOUT_SEC), analyzed with --timeout 0 s)\n") !=
          std::string::npos);
}

TEST_CASE("the live report: its heading, the lead verdict, the clock line, and one wording per rank state") {
    Analysis a = hung_job();
    auto& ranks = a.jobs[0].comms[0].view.ranks;
    ranks[3].stall_since_ns = 4000;  // its own watchdog flagged the stall: it waits in #42 like the others
    ranks[5].alive = false;
    ranks[6].alive = false;
    ranks[6].exited_clean = true;
    ranks[9].reached = 41;  // its GPU has provably not got to #42
    ranks[9].progress_exact = true;
    report::LiveClocks clocks;
    clocks.exact = 2;
    clocks.estimated = 62;
    clocks.window = 64;
    clocks.widest_spread_ns = 1'500'000;
    const report::LiveText live = report::live_report_text(a, "job-7", a.jobs[0].now_real_ns, false, clocks);
    const std::string& text = live.text;
    CHECK(text.rfind("ncclwatch live report, job job-7, " + text::rfc3339(a.jobs[0].now_real_ns) + "\n", 0) == 0);
    REQUIRE(!live.first_line.empty());
    CHECK(text.find("\n" + live.first_line + "\n") != std::string::npos);
    CHECK(text.find("clock offsets: 2 rank(s) on this host's boot (exact), 62 estimated by a one-way minimum filter "
                    "over the last 64 frames (each estimate is late by that rank's smallest one-way network delay; "
                    "the widest window spread is 1.500 ms)\n") != std::string::npos);
    CHECK(text.find("\ncomm 0x00000000000000c0 (64 ranks)\n") != std::string::npos);
    CHECK(report::live_report_text(a, "job-7", a.jobs[0].now_real_ns, true, clocks)
              .text.find(" (again: the ranks' Python stacks came)\n") != std::string::npos);

    // The state column of communicator 0xc0's table, by comm rank (a row: 93 characters, two spaces, the state).
    const size_t table = text.find("\ncomm 0x00000000000000c0");
    REQUIRE(table != std::string::npos);
    auto state_of = [&](int rank) {
        const std::string n = std::to_string(rank), col = std::string(6 - n.size(), ' ') + n;
        const std::string head = "\n  " + col + " " + col + " ";
        const size_t at = text.find(head, table);
        if (at == std::string::npos) return std::string("(no row)");
        const size_t end = text.find('\n', at + 1);
        return text.substr(at + 1 + 95, end - (at + 1 + 95));
    };
    CHECK(state_of(0) == "waiting in #42");
    CHECK(state_of(3) == "waiting in #42");
    CHECK(state_of(4) == "waiting in #42");
    CHECK(state_of(5) == "GONE");
    CHECK(state_of(6) == "exited");
    CHECK(state_of(9) == "GPU busy before #42");
    CHECK(state_of(17) == "idle");
    CHECK(text.find("  alive\n") == std::string::npos);
    CHECK(text.find("  stalled\n") == std::string::npos);
}

// One wording of a rank's state for every table (report_text.h rank_state_words): three ranks waiting in the same op
// read alike in analyze's table and in the live report's, whether or not their own watchdog has flagged the stall
// yet, and whatever their GPUs have proven of it.
TEST_CASE("three ranks waiting in one op get the same word in every table") {
    Analysis a = hung_job();
    auto& ranks = a.jobs[0].comms[0].view.ranks;
    ranks[3].stall_since_ns = 4000;  // its watchdog flagged the stall; rank 0's and rank 4's not yet
    ranks[4].reached = 41;           // its GPU has not been seen at #42 (lower bounds: it is not proven behind)
    for (int r : {0, 3, 4}) CHECK(report::rank_state_words(ranks[size_t(r)]) == "waiting in #42");

    // analyze's table, one row per rank: the state is the last column.
    report::TextOptions opt;
    opt.all_ranks = true;
    const std::string text = report::render_text(a, opt);
    const size_t table = text.find("  communicator 0x00000000000000c0");
    REQUIRE(table != std::string::npos);
    auto analyze_state = [&](int rank) {
        const std::string n = std::to_string(rank);
        size_t at = table;
        while ((at = text.find('\n', at)) != std::string::npos) {
            ++at;
            const size_t end = text.find('\n', at);
            const std::string row = text.substr(at, end - at);
            std::istringstream words(row);
            std::string r, g;
            words >> r >> g;
            if (r == n && g == n) return row;
        }
        return std::string("(no row)");
    };
    for (int r : {0, 3, 4}) {
        INFO("analyze's row of rank " << r << ": " << analyze_state(r));
        CHECK_THAT(analyze_state(r), Catch::EndsWith("  waiting in #42"));
    }
    CHECK(text.find("stalled\n") == std::string::npos);
    CHECK(text.find("inside #42") == std::string::npos);

    // Grouped (the default for 64 ranks): identical progress and state share a row, so the waiting ranks with the
    // same counts stay together whatever their watchdogs said.
    const std::string grouped = report::render_text(a, report::TextOptions{});
    CHECK(grouped.find("\n    0-3,5-16,18-63 ") != std::string::npos);

    // The live report's table: the same words.
    const std::string live = report::live_report_text(a, "job-7", a.jobs[0].now_real_ns, false, {}).text;
    for (int r : {0, 3, 4}) {
        const std::string n = std::to_string(r), col = std::string(6 - n.size(), ' ') + n;
        const size_t at = live.find("\n  " + col + " " + col + " ");
        REQUIRE(at != std::string::npos);
        const size_t end = live.find('\n', at + 1);
        CHECK_THAT(live.substr(at + 1, end - at - 1), Catch::EndsWith("  waiting in #42"));
    }
}

TEST_CASE("rank_state_words: the list of states, and what else is known of a rank") {
    verdict::RankCommState r;
    r.comm_state = uint32_t(disk::CommState::Active);
    r.gpu_tracking = true;
    r.issued = 5;
    r.completed = 5;
    CHECK(report::rank_state_words(r) == "idle");
    r.issued = 6;
    CHECK(report::rank_state_words(r) == "waiting in #6");
    r.stall_since_ns = 123;  // the rank's own flag changes nothing
    CHECK(report::rank_state_words(r) == "waiting in #6");
    r.reached = 5;
    r.progress_exact = true;  // its GPU provably has not reached #6
    CHECK(report::rank_state_words(r) == "GPU busy before #6");
    r.async_error = 6;  // ncclRemoteError
    CHECK(report::rank_state_words(r) == "GPU busy before #6, async error ncclRemoteError (6)");
    r.async_error = 7;  // ncclInProgress: not an error
    CHECK(report::rank_state_words(r) == "GPU busy before #6");
    r.async_error = 0;
    r.gpu_tracking = false;
    CHECK(report::rank_state_words(r) == "waiting in #6, no GPU tracking");
    r.gpu_tracking = true;
    r.comm_state = uint32_t(disk::CommState::Initializing);
    CHECK(report::rank_state_words(r) == "initializing");
    r.comm_state = uint32_t(disk::CommState::InitFailed);
    CHECK(report::rank_state_words(r) == "init failed");
    r.comm_state = uint32_t(disk::CommState::Destroyed);
    CHECK(report::rank_state_words(r) == "destroyed");
    r.alive = false;
    CHECK(report::rank_state_words(r) == "GONE");
    r.heartbeat_age_s = 12.34;
    CHECK(report::rank_state_words(r) == "GONE (heartbeat 12.3 s old)");
    r.exited_clean = true;
    CHECK(report::rank_state_words(r) == "exited");
}

// Issue 28, point 4: the JSON of a verdict whose culprits and missing ranks a claimed size of 2^20 makes holds at most
// kMaxListedRanks of each, with the whole count beside: a forged claim took analyze --json to 318 MB and 61 MB.
TEST_CASE("lists of ranks in the JSON are cut at kMaxListedRanks, with their count") {
    Analysis a = hung_job();
    CommResult& c = a.jobs[0].comms[0];
    c.view.nranks = 1 << 20;
    verdict::Verdict& v = c.verdicts[0];
    v.kind = verdict::Kind::Unknown;
    for (int r = 64; r < (1 << 20); ++r) c.missing.push_back(r);
    v.culprits = v.missing = c.missing;
    const nlohmann::json j = report::analysis_json(a, 0);
    nlohmann::json jv;
    for (const auto& e : j["verdicts"])
        if (e["kind"] == "UNKNOWN") jv = e;
    REQUIRE(jv.is_object());
    CHECK(jv["culprits"].size() == report::kMaxListedRanks);
    CHECK(jv["culprits_count"] == c.missing.size());
    CHECK(jv["missing"].size() == report::kMaxListedRanks);
    CHECK(jv["missing_count"] == c.missing.size());
    CHECK(j["comms"][0]["comm_id"] == "0x00000000000000c0");
    CHECK(j["comms"][0]["missing_count"] == c.missing.size());
    CHECK(j["jobs"][0]["missing"][0]["comm_ranks_count"] == c.missing.size());
    CHECK(j["jobs"][0]["missing"][0]["text"] == "64-1048575");
    CHECK(j.dump().size() < 2'000'000);
    // Whole lists come without a count.
    const nlohmann::json small = report::analysis_json(hung_job(), 0);
    CHECK_FALSE(small["verdicts"][0].contains("culprits_count"));
    CHECK_FALSE(small["verdicts"][0].contains("missing_count"));
    const nlohmann::json rj = report::verdict_json(v, "job-7");
    CHECK(rj["culprits"].size() == report::kMaxListedRanks);
    CHECK(rj["missing_count"] == c.missing.size());
}

// Prometheus text rendering (lib/report/metrics.h).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "report/metrics.h"

using namespace ncw::metrics;

TEST_CASE("label values are escaped") {
    CHECK(escape_label("plain") == "plain");
    CHECK(escape_label("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("label values are valid UTF-8: invalid bytes become U+FFFD, valid text passes") {
    const std::string fffd = "\xEF\xBF\xBD";
    const std::string valid = "n\xC3\xB6" "de-\xE2\x82\xAC-\xF0\x9F\x9A\x80";  // split: \x takes every hex digit
    CHECK(escape_label(valid) == valid);
    CHECK(escape_label("job\xFF") == "job" + fffd);
    CHECK(escape_label("\xC3") == fffd);                             // truncated
    CHECK(escape_label("\xC0\xAF") == fffd + fffd);                  // overlong '/'
    CHECK(escape_label("\xED\xA0\x80") == fffd + fffd + fffd);       // a surrogate
    CHECK(escape_label("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // past U+10FFFF
    CHECK(escape_label("a\x80\"b") == "a" + fffd + "\\\"b");
}

TEST_CASE("one sample per rank and communicator, families typed, totals last") {
    RankCommSample s;
    s.job = "j\"1";
    s.global_rank = 3;
    s.host = "node-a";
    s.pid = 42;
    s.comm_id = 0xabc;
    s.comm_rank = 1;
    s.issued = 10;
    s.reached = 9;
    s.completed = 8;
    s.since_progress_s = 2.5;
    s.stalled = true;
    s.connected = true;
    RankCommSample never = s;
    never.global_rank = 4;
    never.since_progress_s = -1;
    never.stalled = false;
    CollectorTotals t;
    t.connections = 2;
    t.bad_frames = 1;
    const std::string out = render({s, never}, t);

    const std::string lbl = R"(job="j\"1",rank="3",host="node-a",pid="42",comm="0x0000000000000abc",comm_rank="1")";
    CHECK(out.find("# TYPE ncclwatch_coll_issued gauge\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_issued{" + lbl + "} 10\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_reached{" + lbl + "} 9\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_completed{" + lbl + "} 8\n") != std::string::npos);
    CHECK(out.find("ncclwatch_seconds_since_progress{" + lbl + "} 2.5\n") != std::string::npos);
    CHECK(out.find("ncclwatch_stalled{" + lbl + "} 1\n") != std::string::npos);
    CHECK(out.find("ncclwatch_connected{" + lbl + "} 1\n") != std::string::npos);
    // No progress yet: the sample is left out rather than made up.
    CHECK(out.find(R"(ncclwatch_seconds_since_progress{job="j\"1",rank="4")") == std::string::npos);
    CHECK(out.find(R"(ncclwatch_stalled{job="j\"1",rank="4")") != std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_collector_bad_frames_total counter\nncclwatch_collector_bad_frames_total 1\n") !=
          std::string::npos);
    CHECK(out.find("ncclwatch_collector_connections 2\n") != std::string::npos);
    // Every line is a comment or "name{labels} value" / "name value".
    size_t pos = 0;
    while (pos < out.size()) {
        const size_t eol = out.find('\n', pos);
        REQUIRE(eol != std::string::npos);
        const std::string line = out.substr(pos, eol - pos);
        CHECK(!line.empty());
        if (line[0] != '#') CHECK(line.find(' ') != std::string::npos);
        pos = eol + 1;
    }
}

TEST_CASE("early suspicion: the communicator's suspicion and the rank's baseline, left out while it has none") {
    RankCommSample s;
    s.job = "j";
    s.global_rank = 0;
    s.host = "h";
    s.pid = 7;
    s.comm_id = 0xabc;
    s.comm_rank = 0;
    s.suspected = true;
    s.gap_p99_s = 0.025;
    RankCommSample fresh = s;
    fresh.global_rank = 1;
    fresh.comm_rank = 1;
    fresh.suspected = false;
    fresh.gap_p99_s = -1;
    const std::string out = render({fresh, s}, CollectorTotals{});
    const std::string lbl = R"(job="j",rank="0",host="h",pid="7",comm="0x0000000000000abc",comm_rank="0")";
    const std::string lbl1 = R"(job="j",rank="1",host="h",pid="7",comm="0x0000000000000abc",comm_rank="1")";
    CHECK(out.find("# TYPE ncclwatch_comm_suspected gauge\n") != std::string::npos);
    CHECK(out.find("ncclwatch_comm_suspected{" + lbl + "} 1\n") != std::string::npos);
    CHECK(out.find("ncclwatch_comm_suspected{" + lbl1 + "} 0\n") != std::string::npos);
    CHECK(out.find("ncclwatch_completion_gap_p99_seconds{" + lbl + "} 0.025\n") != std::string::npos);
    CHECK(out.find("ncclwatch_completion_gap_p99_seconds{" + lbl1) == std::string::npos);
    // Under a cap, a suspected rank's series come first, as a stalled one's.
    CHECK(out.find("ncclwatch_coll_issued{" + lbl + "}") < out.find("ncclwatch_coll_issued{" + lbl1 + "}"));
}

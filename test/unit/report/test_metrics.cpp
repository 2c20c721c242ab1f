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
    const std::string valid =
        "n\xC3\xB6"
        "de-\xE2\x82\xAC-\xF0\x9F\x9A\x80";  // split: \x takes every hex digit
    CHECK(escape_label(valid) == valid);
    CHECK(escape_label("job\xFF") == "job" + fffd);
    CHECK(escape_label("\xC3") == fffd);                                   // truncated
    CHECK(escape_label("\xC0\xAF") == fffd + fffd);                        // overlong '/'
    CHECK(escape_label("\xED\xA0\x80") == fffd + fffd + fffd);             // a surrogate
    CHECK(escape_label("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // past U+10FFFF
    CHECK(escape_label("a\x80\"b") == "a" + fffd + "\\\"b");
}

TEST_CASE("CUDA's PCI bus id is written as dcgm-exporter writes it") {
    CHECK(dcgm_pci_bus_id("0000:0d:00.0") == "00000000:0D:00.0");
    CHECK(dcgm_pci_bus_id("00000000:B4:00.0") == "00000000:B4:00.0");
    CHECK(dcgm_pci_bus_id("0d:00.0") == "00000000:0D:00.0");
    CHECK(dcgm_pci_bus_id("not a bus id") == "not a bus id");
    CHECK(dcgm_pci_bus_id("") == "");
}

namespace {

RankCommSample sample() {
    RankCommSample s;
    s.job = "j\"1";
    s.global_rank = 3;
    s.host = "node-a";
    s.comm_id = 0xabc;
    s.comm_rank = 1;
    s.pci_bus_id = "0000:0d:00.0";
    s.gpu_uuid = "GPU-5d3f1a2b-0c4d-4e5f-8a9b-0c1d2e3f4a5b";
    s.ops_issued = 12;
    s.ops_completed = 11;
    s.issued = 10;
    s.reached = 9;
    s.completed = 8;
    s.last_progress_unix_s = 1764633600.5;
    s.stalled = true;
    s.connected = true;
    return s;
}

const BuildInfo kBuild{"0.1.0", "abc1234"};

// Every line is a comment or "name{labels} value" / "name value".
void check_lines(const std::string& out) {
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

}  // namespace

TEST_CASE(
    "Prometheus text: counters as *_total, progress as a Unix timestamp, stable labels that join dcgm-exporter's") {
    RankCommSample s = sample();
    RankCommSample never = s;
    never.global_rank = 4;
    never.last_progress_unix_s = -1;
    never.stalled = false;
    never.pci_bus_id.clear();
    never.gpu_uuid.clear();
    CollectorTotals t;
    t.connections = 2;
    t.bad_frames = 1;
    const std::string out = render({s, never}, {{"j\"1", 0xabc, "MISMATCH"}}, {}, t, kBuild);

    const std::string lbl =
        R"(job_id="j\"1",rank="3",Hostname="node-a",comm="0x0000000000000abc",comm_rank="1",pci_bus_id="00000000:0D:00.0",)"
        R"(UUID="GPU-5d3f1a2b-0c4d-4e5f-8a9b-0c1d2e3f4a5b")";
    CHECK(out.find(
              "# TYPE ncclwatch_build_info gauge\nncclwatch_build_info{version=\"0.1.0\",revision=\"abc1234\"} 1\n") !=
          std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_ops_issued_total counter\n") != std::string::npos);
    CHECK(out.find("ncclwatch_ops_issued_total{" + lbl + "} 12\n") != std::string::npos);
    CHECK(out.find("ncclwatch_ops_completed_total{" + lbl + "} 11\n") != std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_coll_issued_total counter\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_issued_total{" + lbl + "} 10\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_reached_total{" + lbl + "} 9\n") != std::string::npos);
    CHECK(out.find("ncclwatch_coll_completed_total{" + lbl + "} 8\n") != std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_last_progress_timestamp_seconds gauge\n") != std::string::npos);
    CHECK(out.find("ncclwatch_last_progress_timestamp_seconds{" + lbl + "} 1764633600.5\n") != std::string::npos);
    CHECK(out.find("ncclwatch_stalled{" + lbl + "} 1\n") != std::string::npos);
    CHECK(out.find("ncclwatch_connected{" + lbl + "} 1\n") != std::string::npos);
    CHECK(out.find(R"(ncclwatch_verdict{job_id="j\"1",comm="0x0000000000000abc",kind="MISMATCH"} 1)") !=
          std::string::npos);
    // No pid, no ages, no gauges of monotonic counts.
    CHECK(out.find("pid=") == std::string::npos);
    CHECK(out.find("since_progress") == std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_coll_issued gauge") == std::string::npos);
    // No progress yet: the sample is left out rather than made up; no GPU known: no pci_bus_id or UUID label.
    CHECK(out.find(R"(ncclwatch_last_progress_timestamp_seconds{job_id="j\"1",rank="4")") == std::string::npos);
    CHECK(
        out.find(
            R"(ncclwatch_stalled{job_id="j\"1",rank="4",Hostname="node-a",comm="0x0000000000000abc",comm_rank="1"} 0)") !=
        std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_collector_bad_frames_total counter\nncclwatch_collector_bad_frames_total 1\n") !=
          std::string::npos);
    CHECK(out.find("ncclwatch_collector_connections 2\n") != std::string::npos);
    CHECK(out.find("# EOF") == std::string::npos);
    check_lines(out);
}

TEST_CASE("OpenMetrics: counter and info families named without their suffix, samples with it, # EOF last") {
    CollectorTotals t;
    t.frames = 5;
    const std::string out = render({sample()}, {}, {}, t, kBuild, Format::OpenMetrics);
    CHECK(out.find("# TYPE ncclwatch_build info\nncclwatch_build_info{version=\"0.1.0\",revision=\"abc1234\"} 1\n") !=
          std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_coll_issued counter\n") != std::string::npos);
    CHECK(out.find("# HELP ncclwatch_coll_issued ") != std::string::npos);
    CHECK(out.find("\nncclwatch_coll_issued_total{job_id=") != std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_collector_frames counter\nncclwatch_collector_frames_total 5\n") !=
          std::string::npos);
    CHECK(out.find("# TYPE ncclwatch_last_progress_timestamp_seconds gauge\n") != std::string::npos);
    CHECK(out.find("_total counter") == std::string::npos);
    CHECK(out.size() >= 6);
    CHECK(out.substr(out.size() - 6) == "# EOF\n");
    CHECK(out.find("# EOF") == out.size() - 6);
    // No verdict: no family header without a sample.
    CHECK(out.find("ncclwatch_verdict") == std::string::npos);
    check_lines(out);
    CHECK(std::string(content_type(Format::OpenMetrics)).rfind("application/openmetrics-text; version=1.0.0", 0) == 0);
    CHECK(std::string(content_type(Format::Prometheus)).rfind("text/plain; version=0.0.4", 0) == 0);
}

TEST_CASE("early suspicion: the communicator's suspicion and the rank's baseline, left out while it has none") {
    RankCommSample s;
    s.job = "j";
    s.global_rank = 0;
    s.host = "h";
    s.comm_id = 0xabc;
    s.comm_rank = 0;
    s.suspected = true;
    s.gap_p99_s = 0.025;
    RankCommSample fresh = s;
    fresh.global_rank = 1;
    fresh.comm_rank = 1;
    fresh.suspected = false;
    fresh.gap_p99_s = -1;
    const std::string out = render({fresh, s}, {}, {}, CollectorTotals{}, kBuild);
    const std::string lbl = R"(job_id="j",rank="0",Hostname="h",comm="0x0000000000000abc",comm_rank="0")";
    const std::string lbl1 = R"(job_id="j",rank="1",Hostname="h",comm="0x0000000000000abc",comm_rank="1")";
    CHECK(out.find("# TYPE ncclwatch_comm_suspected gauge\n") != std::string::npos);
    CHECK(out.find("ncclwatch_comm_suspected{" + lbl + "} 1\n") != std::string::npos);
    CHECK(out.find("ncclwatch_comm_suspected{" + lbl1 + "} 0\n") != std::string::npos);
    CHECK(out.find("ncclwatch_completion_gap_p99_seconds{" + lbl + "} 0.025\n") != std::string::npos);
    CHECK(out.find("ncclwatch_completion_gap_p99_seconds{" + lbl1) == std::string::npos);
    // Under a cap, a suspected rank's series come first, as a stalled one's.
    CHECK(out.find("ncclwatch_coll_issued_total{" + lbl + "}") < out.find("ncclwatch_coll_issued_total{" + lbl1 + "}"));
}

// A page names who holds the job up: one info series per communicator with the culprits of its lead verdict, which
// docs/monitoring/alerts.yml joins on (job_id, comm); label values escaped like any other.
TEST_CASE("ncclwatch_stall_culprit_info: the culprits' ranks, hosts and op, one series per communicator") {
    const std::vector<CulpritSample> culprits = {
        {"train-1", 0xaa, "NOT_JOINED", "2", "node-b", "AllReduce #6"},
        {"j\"2", 0xbb, "DEAD", "3,5-7 and 4 more", "n\"1,n\\2,n3,n4 and 1 more", "Send #41"}};
    for (const Format f : {Format::Prometheus, Format::OpenMetrics}) {
        const std::string out = render({sample()}, {{"train-1", 0xaa, "NOT_JOINED"}}, culprits, {}, kBuild, f);
        CHECK(out.find(f == Format::OpenMetrics ? "# TYPE ncclwatch_stall_culprit info\n"
                                                : "# TYPE ncclwatch_stall_culprit_info gauge\n") != std::string::npos);
        CHECK(out.find(R"(ncclwatch_stall_culprit_info{job_id="train-1",comm="0x00000000000000aa",kind="NOT_JOINED",)"
                       R"(culprit_rank="2",culprit_host="node-b",op="AllReduce #6"} 1)"
                       "\n") != std::string::npos);
        CHECK(out.find(R"(ncclwatch_stall_culprit_info{job_id="j\"2",comm="0x00000000000000bb",kind="DEAD",)"
                       R"(culprit_rank="3,5-7 and 4 more",culprit_host="n\"1,n\\2,n3,n4 and 1 more",op="Send #41"} 1)"
                       "\n") != std::string::npos);
        check_lines(out);
    }
    // None named: no family header without a sample.
    CHECK(render({sample()}, {}, {}, {}, kBuild).find("ncclwatch_stall_culprit") == std::string::npos);
}

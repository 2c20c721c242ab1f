// In-collective GPU times from the ring (read/gpu_spans.h): which records give one, the window kept, the live
// collector's merge, and the whole way from rank files to a STRAGGLER verdict in analyze().
#include "rank_file_fixtures.h"
#include "read/gpu_spans.h"

using namespace rank_file_fixtures;
using namespace ncw;
using disk::OpType;

namespace {

constexpr uint64_t kMsNs = 1'000'000;

// A collective of `comm` at `seq` whose GPU started at `start` and ended `dur` later, flagged gpu-timed.
disk::OpRecord& add_timed(FileBuilder& b, uint64_t comm, uint64_t seq, uint64_t start, uint64_t dur,
                          OpType op = OpType::AllReduce) {
    disk::OpRecord& r = b.add_record(comm, seq, op);
    r.t_reached_ns = start;
    r.t_done_ns = start + dur;
    r.flags = disk::kFlagGpuTimed;
    return r;
}

}  // namespace

TEST_CASE("GPU spans: gpu-timed collectives of profiler-timed comms, the newest 64, by seq", "[rank_file][gpu]") {
    TempDir dir;
    FileBuilder b;
    auto& a = b.add_comm(0xAAAA, 0, 2);
    a.gpu_source = uint32_t(disk::GpuSource::Profiler);
    auto& e = b.add_comm(0xBBBB, 0, 2);
    e.gpu_source = uint32_t(disk::GpuSource::Events);
    for (uint64_t s = 1; s <= 70; ++s) {
        add_timed(b, 0xAAAA, s, 5000 * kMsNs + s * 30 * kMsNs, s * 1000);
        add_timed(b, 0xBBBB, s, 5000 * kMsNs + s * 30 * kMsNs, 7);  // flagged, but its comm is not profiler-timed
    }
    add_timed(b, 0xAAAA, 71, 9000 * kMsNs, 5).flags = 0;      // CUDA events' times: no span
    add_timed(b, 0xAAAA, 72, 9000 * kMsNs, 5).t_done_ns = 0;  // not done yet
    add_timed(b, 0xAAAA, 3, 9000 * kMsNs, 5, OpType::Send);   // p2p: its own seq space
    const auto path = dir.file("r0.ncw");
    b.write(path);

    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.write_ticket() == 143);
    auto comms = f.comms();
    REQUIRE(comms.size() == 2);
    read_gpu_spans(f, comms, 4096);
    const auto& s = comms[0].gpu_spans;
    REQUIRE(s.size() == kMaxGpuSpans);
    CHECK(s.front().seq == 7);
    CHECK(s.back().seq == 70);
    CHECK(s.back().gpu_ns == 70000);
    CHECK(s.back().t_end_ns == 5000 * kMsNs + 70 * 30 * kMsNs + 70000);
    for (size_t i = 1; i < s.size(); ++i) CHECK(s[i].seq == s[i - 1].seq + 1);
    CHECK(comms[1].gpu_spans.empty());

    // Only the newest records are looked at: 20 of them hold #61 .. #70 of comm A.
    auto few = f.comms();
    read_gpu_spans(f, few, 23);
    REQUIRE(few[0].gpu_spans.size() == 10);
    CHECK(few[0].gpu_spans.front().seq == 61);

    // A snapshot that reads the ring has them, and the engine's input carries them.
    const FileSnapshot snap = snapshot_path(path, true);
    REQUIRE(snap.ok);
    REQUIRE(snap.comms[0].gpu_spans.size() == kMaxGpuSpans);
    LivenessContext ctx;
    ctx.live = false;
    const auto st = to_rank_comm_state(snap.header, snap.comms[0], path, ctx);
    CHECK(st.gpu_spans.size() == kMaxGpuSpans);
    CHECK(snapshot_path(path, false).comms[0].gpu_spans.empty());
}

TEST_CASE("GPU spans: a live collector's history merges digests by seq", "[rank_file][gpu]") {
    std::vector<verdict::GpuSpan> h;
    std::vector<verdict::GpuSpan> d1, d2;
    for (uint64_t s = 1; s <= 32; ++s) d1.push_back({s, 10, s * 100});
    for (uint64_t s = 20; s <= 60; ++s) d2.push_back({s, 20, s * 100});
    merge_gpu_spans(h, d1);
    REQUIRE(h.size() == 32);
    merge_gpu_spans(h, d2);
    REQUIRE(h.size() == 60);
    CHECK(h[18].seq == 19);
    CHECK(h[18].gpu_ns == 10);
    CHECK(h[19].gpu_ns == 20);  // the newer digest's span wins
    std::vector<verdict::GpuSpan> d3;
    for (uint64_t s = 61; s <= 66; ++s) d3.push_back({s, 30, s * 100});
    merge_gpu_spans(h, d3);  // 66 seqs: the oldest two go
    REQUIRE(h.size() == kMaxGpuSpans);
    CHECK(h.front().seq == 3);
    CHECK(h.back().seq == 66);
    merge_gpu_spans(h, {});
    CHECK(h.size() == kMaxGpuSpans);
}

TEST_CASE("GPU spans: from four rank files to a STRAGGLER in analyze()", "[rank_file][gpu]") {
    TempDir dir;
    std::vector<std::string> paths;
    for (int r = 0; r < 4; ++r) {
        FileBuilder b;
        b.hdr().pid = 500 + r;
        b.hdr().global_rank = r;
        auto& c = b.add_comm(0xC0, r, 4);
        c.gpu_source = uint32_t(disk::GpuSource::Profiler);
        c.progress_exact = 1;
        c.coll_issued = c.coll_returned = c.coll_reached = c.coll_completed = 40;
        c.ops_issued = c.ops_completed = 40;
        // Each rank's clock starts somewhere else: only durations and this rank's own gaps count.
        const uint64_t clock = 1000'000 * kMsNs + uint64_t(r) * 7'777 * kMsNs;
        for (uint64_t s = 1; s <= 40; ++s) {
            FileBuilder::add_sig(c, s);
            // Steps of 30 ms: rank 3 reaches each collective 20 ms after the others, who wait for it.
            const uint64_t end = clock + s * 30 * kMsNs + 21 * kMsNs;
            const uint64_t dur = (r == 3 ? 1 : 21) * kMsNs + ((s * 7 + uint64_t(r) * 3) % 5) * 100'000;
            add_timed(b, 0xC0, s, end - dur, dur);
        }
        c.t_last_issue_ns = c.t_last_progress_ns = clock + 40 * 30 * kMsNs;
        b.hdr().heartbeat_mono_ns = 1100'000000000ull;
        paths.push_back(dir.file("r" + std::to_string(r) + ".ncw"));
        b.write(paths.back());
    }
    AnalysisOptions opt;
    opt.timeout_s = 10;
    const Analysis a = analyze_paths(paths, opt);
    REQUIRE(a.jobs.size() == 1);
    REQUIRE(a.jobs[0].comms.size() == 1);
    const auto& vs = a.jobs[0].comms[0].verdicts;
    REQUIRE(vs.size() == 1);
    CHECK(vs[0].kind == verdict::Kind::Straggler);
    CHECK(vs[0].culprits == std::vector<int>{3});
    CHECK(vs[0].summary.find("spent the least time inside 24 of 24 collectives") != std::string::npos);
    CHECK_FALSE(a.found_problem());
}

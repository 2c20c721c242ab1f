// What the live collector's verdict costs past the number of connections a machine lets one process hold: N ranks of
// one world communicator, held as `serve` holds them (a FileSnapshot each, on the collector's clock, 64 signatures),
// judged in process, no sockets. Times one analysis in the steady state (every rank inside the next AllReduce) and at
// a stall (one laggard never issued it, the others wait past the timeout), and the live report's text and JSON.
//
//   analysis_scale [--ranks 131072] [--reps 3]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "read/time_base.h"
#include "report/headline.h"
#include "report/report_json.h"
#include "report/report_text.h"

namespace {

using namespace ncw;

uint64_t mono_ns() { return time_base::clock_ns(CLOCK_MONOTONIC); }
double secs(uint64_t a, uint64_t b) { return double(b - a) / 1e9; }

constexpr uint64_t kOpNs = 250'000'000;  // one AllReduce every 250 ms, as digest_load
constexpr uint64_t kOps = 80;            // the stall at #81
constexpr double kTimeoutS = 5;

// The ranks as `serve` holds them at `now`: stalled (the laggard completed #80 and issued nothing more, the others
// wait in #81 since 5.05 s), or running (each inside the next op).
std::vector<FileSnapshot> job(int n, bool stalled, uint64_t now) {
    const int laggard = n * 7 / 13;
    const uint64_t S = stalled ? now - uint64_t((kTimeoutS + 0.05) * 1e9) : now + 1'000'000'000ull;
    const uint64_t t0 = S - kOps * kOpNs;
    const uint64_t boot = this_boot_id_hash();
    std::vector<FileSnapshot> snaps(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
        FileSnapshot& s = snaps[size_t(r)];
        const std::string host = "sim-node-" + std::to_string(r / 8);
        s.ok = true;
        s.path = host + ":/tmp/ncclwatch/digest-load/rank" + std::to_string(r) + ".ncw";
        HeaderInfo& h = s.header;
        h.major = disk::kFormatMajor;
        h.minor = disk::kFormatMinor;
        h.pid = 100000 + r;
        h.global_rank = r;
        h.local_rank = r % 8;
        h.world_size = n;
        h.local_world_size = 8;
        h.host = host;
        h.job_id = "digest-load";
        h.start_mono_ns = t0 - 1'000'000'000ull;
        h.boot_id_hash = boot;
        h.heartbeat_mono_ns = now;
        h.process_state = uint32_t(disk::ProcessState::Running);
        h.nccl_version = 22809;
        h.num_comms = 1;
        const uint64_t done = stalled ? kOps : (now - t0) / kOpNs;
        const uint64_t issued = stalled && r == laggard ? kOps : done + 1;
        const uint64_t progress = stalled ? S : t0 + done * kOpNs;
        CommInfo c;
        c.state = uint32_t(disk::CommState::Active);
        c.rank = r;
        c.nranks = n;
        c.cuda_dev = r % 8;
        c.comm_id = 0xc0ffee0000000001ull;
        c.name = "world";
        c.coll_issued = c.coll_returned = c.coll_reached = c.ops_issued = issued;
        c.coll_completed = c.ops_completed = done;
        c.t_init_start_ns = 1;
        c.t_init_done_ns = 2;
        c.t_last_issue_ns = c.t_last_progress_ns = progress;
        c.gpu_tracking = 1;
        for (uint64_t q = issued > disk::kRecentSigs ? issued - disk::kRecentSigs + 1 : 1; q <= issued; ++q) {
            SigInfo g;
            g.seq = q;
            g.count = 1 << 20;
            g.op = uint8_t(disk::OpType::AllReduce);
            g.dtype = 7;
            g.t_issue_ns = progress;
            g.tid = 1000;
            g.stream = 0x7000;
            c.recent.push_back(g);
        }
        s.comms.push_back(std::move(c));
    }
    return snaps;
}

}  // namespace

int main(int argc, char** argv) {
    int n = 131072, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--ranks")
            n = atoi(argv[i + 1]);
        else if (a == "--reps")
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: analysis_scale [--ranks N] [--reps R]\n");
            return 2;
        }
    }
    for (const bool stalled : {false, true}) {
        const uint64_t now = mono_ns();
        const auto snaps = job(n, stalled, now);
        for (int rep = 0; rep < reps; ++rep) {
            AnalysisOptions ao;
            ao.live = true;
            ao.now_mono_ns = now;
            ao.now_real_ns = time_base::clock_ns(CLOCK_REALTIME);
            ao.timeout_s = kTimeoutS;
            ao.stale_after_s = 30;
            ao.audit = rep == 0;  // as `serve`: the environment audit once, reused while the processes are the same
            const uint64_t t0 = mono_ns();
            const Analysis a = analyze(snaps, ao);
            const uint64_t t1 = mono_ns();
            report::LiveClocks clocks;
            clocks.window = 16;
            clocks.estimated = size_t(n);
            const auto text = report::live_report_text(a, "digest-load", ao.now_real_ns, false, clocks);
            const uint64_t t2 = mono_ns();
            // The verdicts and the per-rank rows of live-report.json, as the collector builds them.
            nlohmann::json j, verdicts = nlohmann::json::array(), rows = nlohmann::json::array();
            for (const auto& ref : a.all_verdicts())
                verdicts.push_back(report::verdict_json_with_headline(*ref.job, *ref.comm, *ref.verdict));
            for (const auto& jr : a.jobs)
                for (const auto& cr : jr.comms)
                    for (const auto& r : cr.view.ranks) {
                        rows.push_back(nlohmann::json{{"comm_rank", r.comm_rank},
                                                      {"global_rank", r.global_rank},
                                                      {"host", r.host},
                                                      {"pid", r.pid},
                                                      {"issued", r.issued},
                                                      {"completed", r.completed}});
                        report::add_progress_basis(rows.back(), r);
                    }
            j["verdicts"] = std::move(verdicts);
            j["rows"] = std::move(rows);
            const std::string js = report::dump_json(j);
            const uint64_t t3 = mono_ns();
            printf("%d ranks, %s: analysis %.3f s%s, report text %.3f s (%.1f MB), JSON %.3f s (%.1f MB)%s%.120s\n", n,
                   stalled ? "stalled" : "running", secs(t0, t1), ao.audit ? " (with the audit)" : "", secs(t1, t2),
                   double(text.text.size()) / 1e6, secs(t2, t3), double(js.size()) / 1e6,
                   text.first_line.empty() ? "" : "; ", text.first_line.c_str());
        }
    }
    return 0;
}

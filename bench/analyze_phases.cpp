// Where the time of `ncclwatch-collector analyze` goes, phase by phase, over a folder of rank files (bench/
// gen_rank_files makes them): reading the snapshots (read/snapshot_batch.h, on THREADS threads), then the one
// analysis (engine/job_view.h), then the text report. Evict the files from the page cache first for a cold read
// (bench/run_analyze_bench.sh does).
//   analyze_phases DIR [THREADS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "read/rank_file.h"
#include "read/snapshot_batch.h"
#include "report/report_text.h"

namespace {

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: analyze_phases DIR [THREADS]\n");
        return 2;
    }
    const unsigned threads = argc > 2 ? unsigned(atoi(argv[2])) : 0;
    auto t0 = std::chrono::steady_clock::now();
    const auto paths = ncw::list_rank_files(argv[1], true);
    const double t_list = since(t0);
    t0 = std::chrono::steady_clock::now();
    const auto snaps = ncw::snapshot_paths(paths, true, threads);
    const double t_read = since(t0);
    t0 = std::chrono::steady_clock::now();
    ncw::AnalysisOptions opt;
    opt.live = false;
    const ncw::Analysis a = ncw::analyze(snaps, opt);
    const double t_analyze = since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::string text = ncw::report::render_text(a, ncw::report::TextOptions{});
    const double t_text = since(t0);
    printf(
        "%zu files (history: %llu records each), %u threads: list %.3f s, read %.3f s, analyze %.3f s, text %.3f s "
        "(%zu bytes)\n",
        paths.size(), (unsigned long long)ncw::history_records_for(snaps.size()),
        threads ? threads : ncw::default_read_threads(), t_list, t_read, t_analyze, t_text, text.size());
    return 0;
}

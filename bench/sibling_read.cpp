// The watchdog's cost of reading its siblings, as shim/watch/watchdog.cpp does it: every *.ncw of a folder opened once
// (kept open across polls), then per iteration a snapshot of each (header and comm table; with --p2p the ring too)
// and one analysis of them:
//   sibling_read DIR [ITERATIONS] [--p2p]
// Prints the mean time of one snapshot round and of one analysis, in microseconds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "read/rank_file.h"

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sibling_read DIR [ITERATIONS] [--p2p]\n");
        return 2;
    }
    const int iters = argc > 2 && argv[2][0] != '-' ? atoi(argv[2]) : 1000;
    const bool p2p = argc > 2 && strcmp(argv[argc - 1], "--p2p") == 0;
    std::map<std::string, ncw::RankFile> files;
    for (const auto& p : ncw::list_rank_files(argv[1], true)) {
        ncw::RankFile f;
        if (f.open(p)) files.emplace(p, std::move(f));
    }
    if (files.empty()) {
        fprintf(stderr, "sibling_read: no readable rank file in %s\n", argv[1]);
        return 2;
    }
    ncw::AnalysisOptions opt;
    opt.live = true;
    opt.stalls = p2p;
    opt.p2p = p2p;
    opt.stragglers = false;
    using clk = std::chrono::steady_clock;
    double read_s = 0, analyze_s = 0;
    size_t comms = 0;
    for (int i = 0; i < iters; ++i) {
        const auto t0 = clk::now();
        std::vector<ncw::FileSnapshot> snaps;
        for (auto& [p, f] : files) snaps.push_back(ncw::snapshot(f, p2p));
        const auto t1 = clk::now();
        const ncw::Analysis a = ncw::analyze(snaps, opt);
        const auto t2 = clk::now();
        comms += snaps.front().comms.size() + a.jobs.size();
        read_s += std::chrono::duration<double>(t1 - t0).count();
        analyze_s += std::chrono::duration<double>(t2 - t1).count();
    }
    printf("%zu files, %d iterations%s: read %.1f us, analysis %.1f us (checksum %zu)\n", files.size(), iters,
           p2p ? " (with rings)" : "", 1e6 * read_s / iters, 1e6 * analyze_s / iters, comms);
    return 0;
}

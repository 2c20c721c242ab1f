// From a set of rank files to verdicts: groups the comm slots of every file by job and communicator, builds the
// verdict engine's CommView per communicator, and runs the engine on each. Shared by the collector (offline, after the
// fact) and the shim's watchdog (live, on the files of its node).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/env_audit.h"
#include "engine/verdict.h"
#include "read/rank_file.h"
#include "read/snapshot.h"  // FileSnapshot, snapshot(), snapshot_path()

namespace ncw {

struct AnalysisOptions {
    // false (offline): "now" for each job is its newest sign of life (heartbeat), and files of other boots are put on
    // that file's clock through their realtime anchors. true (live): now_mono_ns/now_real_ns are this machine's clocks
    // (0 = read them here), files of other boots are rebased onto this boot's clock, and liveness uses kill(pid, 0)
    // for processes of this host.
    bool live = false;
    uint64_t now_mono_ns = 0;
    uint64_t now_real_ns = 0;
    double timeout_s = 0;        // seconds without completion before an outstanding op counts as stalled
    double stale_after_s = 5.0;  // heartbeat age after which a process counts as gone
    bool mismatches = true;      // run verdict::find_mismatches
    bool stalls = true;          // run verdict::diagnose_stall
    bool p2p = true;             // analyze_paths: read the rings for per-peer send/recv counts (the watchdog: off)
    bool stragglers = true;      // run verdict::find_stragglers
    bool suspicion = true;       // with stalls: verdict::diagnose_suspicion where no stall is found (suspicion.h)
    // JobResult::audit (env_audit.h). The live collector reuses its last while the job's processes and their GPUs
    // are the same: at 131,072 ranks, parsing every environment again was a fifth of each analysis.
    bool audit = true;
    // The live collector (issue 45): a communicator's absent ranks (claimed by its size, never reported) are analysed
    // only as far as the job's reports justify them. In all, a job's analysed communicators may miss at most as many
    // ranks as it has reported (ranks in communicators, counted once per communicator), or this floor; the
    // communicators missing the fewest come first, the rest are set aside (JobResult::set_aside). A claimed size is
    // no report: 4,096 communicators of 65,536 ranks, one frame of 1 MiB, took 6.8 GB. 0: no bound (offline, one
    // node's files of a larger job are the usual case and miss most ranks).
    size_t absent_floor = 0;
    // Checked between steps (a file, a communicator): once set, the analysis returns what it has, with a warning
    // (the live collector's stop: SIGTERM is not held up by an analysis). Null: never.
    const std::atomic<bool>* cancel = nullptr;
};

struct CommResult {
    std::string job_id;
    uint64_t comm_id = 0;
    uint64_t parent_id = 0;
    std::string name;                        // ncclConfig_t::commName, from the first rank that has one
    verdict::CommView view;                  // visible ranks, by comm rank; timestamps on the job's clock
    std::vector<int> missing;                // comm ranks with no visible slot
    std::vector<verdict::Verdict> verdicts;  // most important first
    // Early suspicion (engine/suspicion.h): the threshold from the ranks' baselines (0: none yet), and the verdicts
    // of a wait past it that is not a stall yet, labelled suspected, most important first. Kept apart from
    // `verdicts`: a suspicion is not a finding (exit status, reports once, roles of the stalls).
    double suspect_after_s = 0;
    std::vector<verdict::Verdict> suspected;
};

struct JobResult {
    std::string job_id;
    std::vector<std::string> files;     // readable files of this job
    uint64_t now_mono_ns = 0;           // the "now" the stall test used, on the job's clock
    uint64_t now_real_ns = 0;           // the same moment as wall-clock time (0 if unknown)
    std::vector<CommResult> comms;      // in order of creation (comm slot index), then comm id
    std::vector<audit::Finding> audit;  // environment differences and variables that do nothing (env_audit.h)
    // AnalysisOptions::absent_floor: communicators left out of `comms`, their absent ranks more than the job's reports
    // justify; the one missing the most ranks, and how many.
    size_t set_aside = 0;
    uint64_t set_aside_comm = 0;
    int set_aside_nranks = 0, set_aside_seen = 0;
};

struct FileSummary {
    std::string path;
    bool ok = false;
    std::string error;
    std::string job_id;
    std::string host;
    int64_t pid = 0;
    int32_t global_rank = -1;
    uint32_t timeout_ms = 0;  // the stall timeout the writer ran with (read/rank_file.h); 0: not recorded
};

struct Analysis {
    std::vector<JobResult> jobs;  // by job id
    std::vector<FileSummary> files;
    std::vector<std::string> warnings;  // unreadable or damaged files, skipped slots, missing ranks
    size_t files_read = 0;              // files that opened and validated
    bool cancelled = false;             // AnalysisOptions::cancel was set: what is here is incomplete

    struct VerdictRef {
        const JobResult* job;
        const CommResult* comm;
        const verdict::Verdict* verdict;
    };
    // Every verdict of every job, most important first (stable within one importance).
    std::vector<VerdictRef> all_verdicts() const;
    bool found_problem() const;
};

// "0-3,5,7-9"
std::string format_ranks(const std::vector<int>& ranks);

Analysis analyze(const std::vector<FileSnapshot>& files, const AnalysisOptions& opt) noexcept;
// The same over snapshots held elsewhere (the live collector's, shared with its analysis thread).
Analysis analyze(const std::vector<const FileSnapshot*>& files, const AnalysisOptions& opt) noexcept;
Analysis analyze_paths(const std::vector<std::string>& paths, const AnalysisOptions& opt) noexcept;

}  // namespace ncw

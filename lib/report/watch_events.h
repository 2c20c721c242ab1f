// The events of a rank's watchdog, worded: a stall, a suspicion, an init that hangs or is suspected of it, a mismatch
// or a drift, a straggler, a recovery, the final verdict at the end. Each is its lines for stderr and its entry in
// <rank file>.report.json (schema ncclwatch.report/1); the shim (shim/watch/dump_writer.cpp) prints and writes them
// and words nothing itself. The verdicts inside are worded by headline.h, as every report words them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"

namespace ncw::report {

// One event: its lines (lines[0] at the margin, the rest as they are) at one level, and its "events" entry (the
// writer adds its "time").
struct WatchEvent {
    bool warning = false;  // a suspicion, a straggler, a recovery, a final verdict with nothing to report: not an error
    std::vector<std::string> lines;
    nlohmann::json event;
};

// What the stalled process knows of its own communicator that no rank file says.
struct OwnStall {
    uint64_t comm_id = 0;
    int rank = -1;
    int nranks = 0;
    verdict::RankCommState counts;  // its progress block, in the engine's words (read/rank_file.h)
    double stalled_for_s = 0;
    double timeout_s = 0;
    double suspected_at_s = -1;  // the wait at which it was suspected; < 0: it was not
    bool tracker_stuck = false;  // the GPU completion poller has not run for over 2 s
    bool no_comm_slot = false;   // watched in memory only (more than max_comms alive at once)
    uint32_t max_comms = 0;
    std::string job_dir;
    // The live collector's verdict line (it sees every node), where this node's files cannot name the culprit; "":
    // none came.
    std::string job_verdict;
};

// The lead verdict of one communicator's verdicts: the initiating one, or the first; nullptr when it has none.
const verdict::Verdict* lead_of(const CommResult* c);

// The stall a report of `view` leads with when it is not its own: the initiating stall it cascades from, or (when its
// own verdict is no cascade) the initiating stall whose culprit process also holds this one up: one process busy
// outside NCCL holds up its tensor- and data-parallel groups. *same_culprit says which of the two. nullptr: none.
const CommResult* leading_stall(const JobResult* job, const CommResult* view, bool* same_culprit);

// Where a lead verdict's full report is, when another rank of this host prints it.
std::string full_report_pointer(int local_rank, int64_t pid, const std::string& report_json_path);

// A stall: what this process sees, then the lead (its cause first, for a cascade), its verdicts and evidence. With
// `elsewhere` set, only the lead's line and where its full report is.
WatchEvent stall_event(const JobResult* job, const CommResult* view, const OwnStall& own, const std::string& elsewhere);
// The live collector's verdict, come after this process reported a stall without it: one line.
WatchEvent collector_verdict_event(const std::string& line);
// Early suspicion (engine/suspicion.h): one line, the lead suspected verdict and why.
WatchEvent suspected_event(const JobResult* job, const CommResult* view, const OwnStall& own, double suspect_after_s,
                           uint64_t gap_p99_ns);
// An init waiting past verdict::kInitSuspectS for a rank never seen (view.suspected holds its verdicts).
WatchEvent init_suspected_event(const JobResult& job, const CommResult& view, uint64_t comm_id, int rank,
                                double waited_s, double timeout_s);
// An init past the timeout: the engine's INIT_HANG verdict, or what this node saw when there is none. With
// `job_verdict` (the live collector's line, where this node sees only part of the communicator), it leads.
// A teardown (ncclCommDestroy, ncclCommFinalize, ncclCommAbort) of this process that has not returned for the timeout:
// the engine's TEARDOWN_HANG verdict of the communicator (every rank of it this node sees), or the bare facts.
WatchEvent teardown_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank,
                               const char* call, double waited_s);
WatchEvent init_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank, int nranks,
                           double waited_s, const std::string& job_verdict = {});
// A mismatch, or a drift with the mismatches it explains after it; led by `job_verdict` as init_hang_event's.
WatchEvent mismatch_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                          const std::string& job_verdict = {});
// Not a hang: a warning.
WatchEvent straggler_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v);
// The stall (or suspicion) ended: progress again, or its op returned an error.
WatchEvent recovered_event(uint64_t comm_id, double waited_s, bool by_error, bool suspicion_only);
// The final verdict at a SIGTERM / SIGINT: the communicators whose verdicts stand at the end, the lead's first; none:
// one line, and an event without verdicts.
// With `job_verdict` (the live collector's line, where this node sees only part of the lead's communicator, or no
// verdict stands here), it leads.
WatchEvent final_event(const char* why, const JobResult* job, const std::vector<const CommResult*>& comms,
                       const std::string& job_verdict = {});

}  // namespace ncw::report

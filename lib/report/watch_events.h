// The events of a rank's watchdog, worded: a stall, a suspicion, an init that hangs or is suspected of it, a mismatch
// or a drift, a straggler, a recovery, the final verdict at the end. Each is its lines for stderr and its entry in
// <rank file>.report.json (schema ncclwatch.report/1); the shim (shim/watch/dump_writer.cpp) prints and writes them
// and words nothing itself. The verdicts inside are worded by headline.h, as every report words them.
//
// Quiet by default: an event's first line is the answer (the lead verdict: the culprit, the op, where it is in its
// code), then at most kEvidenceLines of evidence, the most telling first (summaries, this process's own facts, the
// other verdicts' lines, the evidence, the culprits' rows; the other ranks' rows last); what does not fit is in the
// report file, and on stderr at NCCLWATCH_LOG_LEVEL=debug. One full report per node and event: the other ranks of the
// node say one line that points to it (stall_event with an Elsewhere), or nothing where they share its stderr.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"

namespace ncw::report {

// Lines of evidence an event shows on stderr after its first line, the last of them saying where the rest is when
// some were left out (more_lines_note).
inline constexpr size_t kEvidenceLines = 8;

// One event: its lines for stderr (lines[0] at the margin: the answer; the rest as they are) at one level, what did
// not fit (`more`, in order: for debug level, and the writer ends `lines` with more_lines_note), and its "events"
// entry (the writer adds its "time").
struct WatchEvent {
    bool warning = false;  // a suspicion, a straggler, a recovery, a final verdict with nothing to report: not an error
    std::vector<std::string> lines;
    std::vector<std::string> more;
    bool say_more = true;  // end `lines` with more_lines_note when `more` has lines (false: lines[0] says where)
    nlohmann::json event;
    // Every line before the stderr form was chosen, each with how much it is needed (the first: the answer), so that
    // a writer short of room can choose again with fewer (refit). Empty for a one-line event.
    std::vector<std::pair<std::string, int>> draft;
};

// The stderr form chosen again from the event's draft with at most `evidence_lines` after the answer (the one that
// says where the rest is included, when say_more); the rest into `more`. Nothing changes without a draft.
void refit(WatchEvent& e, size_t evidence_lines);

// The last line of an event whose evidence did not all fit: how many lines, and the file that has them.
std::string more_lines_note(size_t n, const std::string& report_json_path);
// The one line that says where this host's dumps of an event are: `written` of the `asked` ranks (this one included)
// wrote theirs within the wait; `pattern` names the files (a glob of the job folder).
std::string node_dumps_line(const std::string& reason, size_t written, size_t asked, const std::string& pattern,
                            const std::vector<int>& late_ranks);

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

// Where a stall's full report is when this process does not print it: another rank of this host prints it (pid set),
// or this process did already, for an earlier event with the same lead.
struct Elsewhere {
    int local_rank = -1;  // the reporter's local rank (its global rank where the launcher set none)
    int64_t pid = 0;
    std::string report_json;  // its .report.json ("": not known)
    bool printed_here = false;
    bool any() const { return pid != 0 || printed_here; }
};

// Where a lead verdict's full report is, when another rank of this host prints it.
std::string full_report_pointer(int local_rank, int64_t pid, const std::string& report_json_path);

// A stall. The full report: the lead first (the live collector's verdict where this node cannot name the culprit; for
// a cascade, the stall it waits because of), then the evidence, this process's stall, this communicator's verdicts.
// With `elsewhere` set: one line, the lead's and where its full report is (the rest in `more`).
WatchEvent stall_event(const JobResult* job, const CommResult* view, const OwnStall& own,
                       const Elsewhere& elsewhere = {});
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
// A mismatch, or a drift with the mismatches it explains after it; led by `job_verdict` as init_hang_event's. With
// `elsewhere` (another rank of this host prints it): one line, its first and where the full report is.
WatchEvent mismatch_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                          const std::string& job_verdict = {}, const Elsewhere& elsewhere = {});
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

// What the watchdog writes: the report (human text on stderr and <rank file>.report.json beside the rank file) and
// the dump (<rank file>.dump.json: environment, versions, comm table, decoded records with symbolised stacks). Every
// word of a report comes from lib/report (report/watch_events.h); this unit prints and writes them.
// Files are written atomically (temporary file and rename), mode 0640; a failed write (a full disk) is logged once per
// file, the report's and the dump's, and skipped.
// Quiet by default: an event's stderr form is its answer and what evidence fits (the rest at debug level); a stall
// is printed in full by one rank per node and event, and the others say one line that points to it, or nothing where
// their stderr is the reporter's (a log the ranks share); a dump is said by the watchdog once per node, not here.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "report/stderr_budget.h"
#include "report/watch_events.h"
#include "shim/record/runtime.h"

namespace ncw {

class DumpWriter {
public:
    explicit DumpWriter(Runtime& rt) : rt_(rt) {}

    // job and view: this communicator as the watchdog's analysis saw it (nullptr when it was not found); the verdicts
    // are worded by report/headline.h, as every report words them.
    // suspected_at_s: the wait at which this stall was suspected (< 0: it was not).
    // job_verdict: the live collector's verdict line, led with where this node cannot name the culprit ("": none).
    // true: this process printed the stall's full report (it is this node's reporter of the event).
    bool report_stall(const CommRuntime& cr, const JobResult* job, const CommResult* view, double stalled_for_s,
                      bool tracker_stuck, double suspected_at_s = -1, const std::string& job_verdict = "");
    // The live collector's verdict, come after a stall this process reported without it: into the report file, and
    // on stderr unless this process's full report led with the same words already (one voice).
    void report_collector_verdict(const std::string& line);
    // The same into the report file only (this process pointed to its node's report, whose reporter says it).
    void record_collector_verdict(const std::string& line);
    // Early suspicion (engine/suspicion.h): one line (the lead suspected verdict, and why) and a "suspected" event.
    void report_suspected(const CommRuntime& cr, const JobResult* job, const CommResult* view, double waited_s,
                          double suspect_after_s, uint64_t gap_p99_ns);
    void report_teardown_hang(uint64_t comm_id, int rank, const char* call, const JobResult* job,
                              const CommResult* view, double waited_s);
    void report_init_hang(const disk::CommSlot& slot, const JobResult* job, const CommResult* view, double waited_s,
                          const std::string& job_verdict);
    // An init waiting past verdict::kInitSuspectS for a rank never seen (view->suspected holds its verdicts).
    void report_init_suspected(const disk::CommSlot& slot, const JobResult& job, const CommResult& view,
                               double waited_s);
    // at_exit: the process's last check as it exits (a mismatch NCCL completed moments before the job ended): said by
    // the node's first rank of the communicator, the others record it in their report files only.
    void report_mismatch(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                         const std::string& job_verdict, bool at_exit = false);
    // Not a hang: a warning on stderr and a "straggler" event.
    void report_straggler(const JobResult& job, const CommResult& view, const verdict::Verdict& v);
    // suspicion_only: what ended was a suspicion that never became a stall.
    void report_recovered(const CommRuntime& cr, double waited_s, bool by_error, bool suspicion_only = false);
    // The final verdict at a SIGTERM / SIGINT (process_end.h): the communicators whose verdicts stand at the end (a
    // rank gone before this one, a stall), a "final" event each; none: one line and an empty "final" event.
    void report_final(const char* why, const JobResult* job, const std::vector<const CommResult*>& comms,
                      const std::string& job_verdict);
    // Captures the Python stacks first (py_stacks.h) unless capture_py is false (the caller just did), so that each
    // dump has them. announce: say it on stderr (a dump this process was asked for by the user, SIGUSR1); the others
    // are said at debug level, and a stall's once per node (report::node_dumps_line). false: not written.
    bool write_dump(const char* reason, disk::PyStacksReason py_reason = disk::PyStacksReason::DumpRequest,
                    bool capture_py = true, bool announce = false);
    // This process printed a stall's full report: the collector's verdicts are said here (one voice per node).
    bool printed_full_report() const { return !printed_leads_.empty(); }
    // The glob of this host's dump files in the job folder ("<job dir>/rank*-<host>-*.dump.json").
    std::string node_dumps_pattern() const;
    // The line that says where this node's dumps of a stall are (report::node_dumps_line): on stderr where the job's
    // budget of lines leaves room, else at debug level.
    void say_node_dumps(const std::string& line);
    // Where this node's ranks of `c` write their stderr, learnt while they are alive (a rank gone by the end has no
    // /proc entry left to compare with).
    void learn_node_stderr(const CommResult& c);

private:
    // Its lines on stderr (quiet: at debug level only) as the node's budget of lines shapes them (final: the final
    // verdict; job: the analysis it was judged from, whose ranks of this host say what they printed), what did not fit
    // at debug level, its event into .report.json.
    void emit(report::WatchEvent e, bool quiet = false, bool final = false, const JobResult* job = nullptr);
    // The lines this host's other ranks that share our stderr printed, as `job`'s rank files last said.
    size_t node_others_lines(const JobResult* job) const;
    report::OwnStall own_stall(const CommRuntime& cr, double stalled_for_s) const;
    void append_event(nlohmann::json event);
    nlohmann::json process_json() const;

    Runtime& rt_;
    // Where the full report of this lead is printed when not here; none: print it here.
    report::Elsewhere full_report_elsewhere(const JobResult* job, const CommResult* lead_comm);
    // The node's reporter of an event of communicator `c`: the lowest local rank (the global rank where the launcher
    // set none) among this host's live ranks of `c` (of `among`, comm ranks, where given; ending: and those ending by
    // SIGTERM / SIGINT, as this process is). none: this process.
    report::Elsewhere node_reporter(const CommResult& c, const std::vector<int>* among, bool ending = false) const;

    std::mutex mu_;  // the watchdog thread and the exit handler may both write
    std::vector<std::pair<uint64_t, uint64_t>> printed_leads_;  // (comm id, seq) of the stalls printed in full
    std::vector<std::string> printed_answers_;                  // their first lines (the lead's words)
    std::map<uint64_t, int64_t> reporter_of_;  // per communicator, who said its latest stall or suspicion (0: here)
    report::StderrBudget budget_;              // what this process has said on stderr over the job
    std::set<int64_t> stderr_checked_;         // the node's ranks whose stderr was compared with ours
    nlohmann::json events_ = nlohmann::json::array();
    // Each file's first failed write is logged (path and reason), each once: a full disk that failed the dump must
    // not leave the report's failure unsaid, nor fill the log at every event.
    bool report_write_failed_logged_ = false;
    bool dump_write_failed_logged_ = false;
};

}  // namespace ncw

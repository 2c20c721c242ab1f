#include "shim/watch/dump_writer.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "ncclwatch/version.h"
#include "read/rank_file.h"
#include "report/headline.h"
#include "report/report_json.h"
#include "report/watch_events.h"
#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/complete/completion_tracker.h"
#include "shim/record/backtrace.h"
#include "shim/record/rank_file_writer.h"
#include "shim/watch/py_stacks.h"

namespace ncw {

using json = nlohmann::json;

namespace {

std::string now_wall() { return report::wall_time(now_real_ns()); }

// Whether process `pid`'s stderr is this process's (one pipe, file or terminal): a log the ranks share, where a line
// pointing to that process's report would only repeat it. false when not known (its /proc entry is not ours to read).
// Callers hold DumpWriter::mu_. A reporter found sharing our stderr is remembered: at the job's end it may be gone
// (its /proc entry with it) before we say our final words, and it said them on that stderr already.
bool shares_stderr_with(int64_t pid) {
    static std::set<int64_t>& shared = *new std::set<int64_t>;  // leaked: used by the exit path
    if (shared.count(pid)) return true;
    struct stat mine = {};
    struct stat theirs = {};
    if (fstat(STDERR_FILENO, &mine) != 0) return false;
    const std::string fd = "/proc/" + std::to_string(pid) + "/fd/2";
    if (stat(fd.c_str(), &theirs) != 0) return false;
    const bool same = mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
    if (same && shared.size() < 4096) shared.insert(pid);
    return same;
}

}  // namespace

json DumpWriter::process_json() const {
    return json{{"global_rank", rt_.id.global_rank},
                {"local_rank", rt_.id.local_rank},
                {"world_size", rt_.id.world_size},
                {"host", rt_.id.host},
                {"pid", rt_.id.pid},
                {"job_id", rt_.id.job_id},
                {"launcher", rt_.id.launcher},
                {"rank_file", rt_.file.path}};
}

void DumpWriter::append_event(json event) {
    event["time"] = now_wall();
    events_.push_back(std::move(event));
    json doc{{"schema", "ncclwatch.report/1"},
             {"ncclwatch_version", kVersionLine},
             {"process", process_json()},
             {"events", events_}};
    std::string err;
    if (!write_file_atomic(rt_.file.base_path + ".report.json", report::dump_json(doc), &err) &&
        !report_write_failed_logged_) {
        report_write_failed_logged_ = true;
        log().error("cannot write the report file ({}); the report is on stderr only", err);
    }
    rt_.file.hdr->reports_written.fetch_add(1);
}

size_t DumpWriter::node_others_lines(const JobResult* job) const {
    if (!job) return 0;
    std::map<int64_t, uint32_t> lines;
    for (const CommResult& c : job->comms)
        for (const verdict::RankCommState& r : c.view.ranks)
            if (r.host == rt_.id.host && r.pid && r.pid != rt_.id.pid && r.stderr_lines)
                lines[r.pid] = std::max(lines[r.pid], r.stderr_lines);
    size_t sum = 0;
    for (const auto& [pid, n] : lines)
        if (shares_stderr_with(pid)) sum += n;
    return sum;
}

void DumpWriter::emit(report::WatchEvent e, bool quiet, bool final, const JobResult* job) {
    // At debug level everything is said anyway: the budget is the default level's, one per stderr: the node's ranks
    // that share it share it.
    if (!quiet && !log().enabled(LogLevel::debug) && !budget_.shape(e, final, node_others_lines(job))) quiet = true;
    if (!quiet) rt_.file.hdr->stderr_lines.store(uint32_t(budget_.used()), std::memory_order_relaxed);
    if (!e.more.empty() && e.say_more)
        e.lines.push_back(report::more_lines_note(e.more.size(), rt_.file.base_path + ".report.json"));
    for (const std::string& line : e.lines) {
        if (quiet)
            log().debug("{}", line);
        else if (e.warning)
            log().warn("{}", line);
        else
            log().error("{}", line);
    }
    for (const std::string& line : e.more) log().debug("{}", line);
    append_event(std::move(e.event));
}

report::OwnStall DumpWriter::own_stall(const CommRuntime& cr, double stalled_for_s) const {
    report::OwnStall own;
    own.comm_id = cr.comm_id;
    own.rank = cr.rank;
    own.nranks = cr.nranks;
    // The counts in the engine's words, with what they are worth (lower bounds, proofs): the slot read as any reader
    // reads one, and mapped by the format's own lists (read/rank_file.h).
    const std::vector<CommInfo> slot = read_memory_slots({cr.slot.load()});
    if (!slot.empty()) own.counts = to_rank_comm_state(HeaderInfo{}, slot.front(), std::string(), LivenessContext{});
    own.stalled_for_s = stalled_for_s;
    own.timeout_s = rt_.cfg.timeout_sec;
    own.no_comm_slot = cr.slot_index == 0xffff;
    own.max_comms = rt_.file.hdr->max_comms;
    own.job_dir = rt_.file.job_dir;
    return own;
}

bool DumpWriter::report_stall(const CommRuntime& cr, const JobResult* job, const CommResult* view, double stalled_for_s,
                              bool tracker_stuck, double suspected_at_s, const std::string& job_verdict) {
    std::lock_guard<std::mutex> lock(mu_);
    report::OwnStall own = own_stall(cr, stalled_for_s);
    own.tracker_stuck = tracker_stuck;
    own.suspected_at_s = suspected_at_s;
    own.job_verdict = job_verdict;
    bool same_culprit = false;
    const CommResult* cause = report::leading_stall(job, view, &same_culprit);
    const report::Elsewhere elsewhere = full_report_elsewhere(job, cause ? cause : view);
    reporter_of_[cr.comm_id] = elsewhere.pid;
    report::WatchEvent e = report::stall_event(job, view, own, elsewhere);
    if (!elsewhere.any() && !e.lines.empty()) printed_answers_.push_back(e.lines.front());
    // Its one line where the reporter's stderr is not this process's (each rank's own log); nothing but debug where
    // it is: the full report is right there.
    emit(std::move(e), elsewhere.printed_here || (elsewhere.pid && shares_stderr_with(elsewhere.pid)), false, job);
    return !elsewhere.any();
}

report::Elsewhere DumpWriter::full_report_elsewhere(const JobResult* job, const CommResult* lead_comm) {
    report::Elsewhere out;
    const verdict::Verdict* lead = report::lead_of(lead_comm);
    if (!job || !lead) return out;
    const auto key = std::make_pair(lead_comm->comm_id, lead->seq);
    if (std::find(printed_leads_.begin(), printed_leads_.end(), key) != printed_leads_.end()) {
        out.printed_here = true;
        return out;
    }
    // One full report per node and event, by the node's reporter among this host's ranks that wait in the lead
    // stall. Every rank judges the same files the same way and decides alone, from its own reading (no lock, no
    // message, no rank waits for another); readings a moment apart can differ only in who waits yet, so a second full
    // report is possible and a missing one is not: the lowest waiting rank always sees itself waiting. The others, and
    // this process for an event it printed already, print one line that points to it (or none: report_stall).
    out = node_reporter(*lead_comm, &lead->waiting);
    if (!out.pid) printed_leads_.push_back(key);  // this process prints it now
    return out;
}

namespace {

// A rank's place among its node's: its local rank, else its global one.
int node_order(const verdict::RankCommState& r) { return r.local_rank >= 0 ? r.local_rank : r.global_rank; }

}  // namespace

report::Elsewhere DumpWriter::node_reporter(const CommResult& c, const std::vector<int>* among, bool ending) const {
    report::Elsewhere out;
    // No rank named (a GPU that has not reached the op: nobody waits in it): the node's ranks of the communicator,
    // or every rank would print its own copy.
    if (among && among->empty()) among = nullptr;
    const verdict::RankCommState* reporter = nullptr;
    for (const auto& r : c.view.ranks)
        if (r.host == rt_.id.host && (r.alive || (ending && r.end_kind == uint32_t(disk::EndKind::Terminated))) &&
            (!among || std::find(among->begin(), among->end(), r.comm_rank) != among->end()) &&
            (!reporter || node_order(r) < node_order(*reporter)))
            reporter = &r;
    if (reporter && reporter->pid != rt_.id.pid) {
        out.local_rank = node_order(*reporter);
        out.pid = reporter->pid;
        if (reporter->file.size() > 4)
            out.report_json = reporter->file.substr(0, reporter->file.size() - 4) + ".report.json";
    }
    return out;
}

void DumpWriter::report_collector_verdict(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said once: where this process's full report led with the same words, the report file records it, stderr not.
    const bool said = std::find(printed_answers_.begin(), printed_answers_.end(), line) != printed_answers_.end();
    emit(report::collector_verdict_event(line), said);
}

void DumpWriter::record_collector_verdict(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    emit(report::collector_verdict_event(line), true);
}

std::string DumpWriter::node_dumps_pattern() const {
    // base_path: "<job dir>/rank<R>-<host>-<pid>"; the host part as the file names spell it.
    const std::string& b = rt_.file.base_path;
    const size_t slash = b.rfind('/');
    const size_t first = b.find('-', slash == std::string::npos ? 0 : slash);
    const size_t last = b.rfind('-');
    if (first == std::string::npos || last <= first) return b + ".dump.json";
    return b.substr(0, slash + 1) + "rank*" + b.substr(first, last - first) + "-*.dump.json";
}

void DumpWriter::report_suspected(const CommRuntime& cr, const JobResult* job, const CommResult* view, double waited_s,
                                  double suspect_after_s, uint64_t gap_p99_ns) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said once per node, as a stall: by the node's reporter among this host's ranks waiting in the suspected op.
    report::Elsewhere reporter;
    if (view && !view->suspected.empty()) reporter = node_reporter(*view, &view->suspected.front().waiting);
    reporter_of_[cr.comm_id] = reporter.pid;
    emit(report::suspected_event(job, view, own_stall(cr, waited_s), suspect_after_s, gap_p99_ns),
         reporter.pid && shares_stderr_with(reporter.pid), false, job);
}

void DumpWriter::report_init_suspected(const disk::CommSlot& slot, const JobResult& job, const CommResult& view,
                                       double waited_s) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said once per node: by the node's reporter among this host's ranks that entered the init.
    const report::Elsewhere reporter = node_reporter(view, nullptr);
    emit(report::init_suspected_event(job, view, slot.comm_id, slot.rank, waited_s, rt_.cfg.timeout_sec),
         reporter.pid && shares_stderr_with(reporter.pid), false, &job);
}

void DumpWriter::report_teardown_hang(uint64_t comm_id, int rank, const char* call, const JobResult* job,
                                      const CommResult* view, double waited_s) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said once per node where the ranks share a stderr: by the node's reporter among this host's ranks inside the
    // teardown (each judges it from the same files); the others record it in their report files.
    report::Elsewhere reporter;
    if (view)
        for (const auto& v : view->verdicts)
            if (v.kind == verdict::Kind::TeardownHang) reporter = node_reporter(*view, &v.culprits);
    emit(report::teardown_hang_event(job, view, comm_id, rank, call, waited_s),
         reporter.pid && shares_stderr_with(reporter.pid), false, job);
}

void DumpWriter::report_init_hang(const disk::CommSlot& slot, const JobResult* job, const CommResult* view,
                                  double waited_s, const std::string& job_verdict) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said once per node where the ranks share a stderr: by the node's reporter among this host's ranks that entered
    // the init (each judges it from the same files).
    const report::Elsewhere reporter = view ? node_reporter(*view, nullptr) : report::Elsewhere{};
    emit(report::init_hang_event(job, view, slot.comm_id, slot.rank, slot.nranks, waited_s, job_verdict),
         reporter.pid && shares_stderr_with(reporter.pid), false, job);
}

void DumpWriter::report_mismatch(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                                 const std::string& job_verdict, bool at_exit) {
    std::lock_guard<std::mutex> lock(mu_);
    if (at_exit) {
        // Ranks exit together, each seeing the others' ends: by the node's first rank of the communicator, whatever
        // its state, so that one says it.
        const verdict::RankCommState* first = nullptr;
        for (const auto& r : view.view.ranks)
            if (r.host == rt_.id.host && (!first || node_order(r) < node_order(*first))) first = &r;
        emit(report::mismatch_event(job, view, v, job_verdict, {}), first && first->pid != rt_.id.pid, false, &job);
        return;
    }
    // One full report per node, as a stall's: by the node's reporter among this host's ranks of the communicator
    // (each judges it alone, from the same files); the others point to it, or say nothing where they share its stderr.
    const report::Elsewhere elsewhere = node_reporter(view, nullptr);
    emit(report::mismatch_event(job, view, v, job_verdict, elsewhere),
         elsewhere.pid && shares_stderr_with(elsewhere.pid), false, &job);
}

void DumpWriter::report_straggler(const JobResult& job, const CommResult& view, const verdict::Verdict& v) {
    std::lock_guard<std::mutex> lock(mu_);
    emit(report::straggler_event(job, view, v), false, false, &job);
}

void DumpWriter::report_recovered(const CommRuntime& cr, double waited_s, bool by_error, bool suspicion_only) {
    std::lock_guard<std::mutex> lock(mu_);
    // Said by whoever said the stall or the suspicion for the node.
    const auto it = reporter_of_.find(cr.comm_id);
    const int64_t reporter = it == reporter_of_.end() ? 0 : it->second;
    emit(report::recovered_event(cr.comm_id, waited_s, by_error, suspicion_only),
         reporter && shares_stderr_with(reporter));
}

void DumpWriter::report_final(const char* why, const JobResult* job, const std::vector<const CommResult*>& comms,
                              const std::string& job_verdict) {
    std::lock_guard<std::mutex> lock(mu_);
    // Nothing to report is said at debug level (a healthy job stopped hears nothing). What stands is said in full by
    // the node's reporter, the lowest local rank of the lead's communicator on this host still there or ending by the
    // same signal; the others say nothing where they share its stderr (each process ends: nothing to point to).
    bool quiet = comms.empty() && job_verdict.empty();
    if (!comms.empty()) {
        const report::Elsewhere other = node_reporter(*comms.front(), nullptr, true);
        quiet = other.pid && shares_stderr_with(other.pid);
    }
    emit(report::final_event(why, job, comms, job_verdict), quiet, true, job);
}

void DumpWriter::say_node_dumps(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (log().enabled(LogLevel::debug) || budget_.take_note_line()) {
        log().info("{}", line);
        rt_.file.hdr->stderr_lines.store(uint32_t(budget_.used()), std::memory_order_relaxed);
    } else {
        log().debug("{}", line);
    }
}

void DumpWriter::learn_node_stderr(const CommResult& c) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const verdict::RankCommState& r : c.view.ranks)
        if (r.host == rt_.id.host && r.alive && r.pid && r.pid != rt_.id.pid && stderr_checked_.size() < 4096 &&
            stderr_checked_.insert(r.pid).second)
            shares_stderr_with(r.pid);
}

bool DumpWriter::write_dump(const char* reason, disk::PyStacksReason py_reason, bool capture_py, bool announce) {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_py) py_stacks_capture(rt_, py_reason);
    json env = json::object();
    for (const auto& [k, v] : rt_.env) env[k] = v;
    json doc{{"schema", "ncclwatch.dump/1"},
             {"ncclwatch_version", kVersionLine},
             {"reason", reason},
             {"time", now_wall()},
             {"process", process_json()},
             {"nccl_version", report::nccl_version_str(rt_.nccl_version)},
             {"nccl_library", real_nccl_path()},
             {"cuda_driver_version", rt_.file.hdr->cuda_driver_version},
             {"gpu_completion", rt_.tracker ? "cuda-events" : "on-return"},
             {"events_recorded", rt_.tracker ? rt_.tracker->events_recorded() : 0},
             {"event_fallbacks", rt_.tracker ? rt_.tracker->fallbacks() : 0},
             {"ops_without_events", rt_.tracker ? rt_.tracker->followers() : 0},
             {"catch_up_events", rt_.tracker ? rt_.tracker->catch_ups() : 0},
             {"mark_events", rt_.tracker ? rt_.tracker->marks() : 0},
             {"config",
              {{"timeout_sec", rt_.cfg.timeout_sec},
               {"gpu_sample", rt_.cfg.gpu_sample == GpuSample::All ? "all" : "auto"},
               {"action", action_name(rt_.cfg.action)},
               {"ring_size", rt_.cfg.ring_size},
               {"backtrace", rt_.cfg.backtrace}}},
             {"environment", env}};
    RankFile self;
    if (rt_.file.file_backed && self.open(rt_.file.path)) {
        HeaderInfo h = self.header();
        doc["header"] = report::header_json(h);
        // The Python stacks (format 1.5) as the reports read them, the thread that issued NCCL calls first.
        doc["python_stacks"] = report::py_stacks_json(h.py_stacks_status, h.py_stacks_reason, h.py_stacks.get(),
                                                      h.py_stacks_status == uint32_t(disk::PyStacksStatus::Captured)
                                                          ? std::string()
                                                          : h.py_stacks_text.substr(0, 200));
        doc["python_stacks"]["capture_ns"] = py_stacks_last_capture_ns();
        json comms = json::array();
        for (const CommInfo& c : self.comms()) comms.push_back(report::comm_json(c, h.start_mono_ns));
        doc["comms"] = comms;
        RecordSet rs = self.records();
        json recs = json::array();
        for (const Record& r : rs.records) {
            json o = report::record_json(r, h.start_mono_ns, {});
            if (r.flags & disk::kFlagHasBacktrace) {
                json frames = json::array();
                for (uint64_t a : self.backtrace(r.ticket)) frames.push_back(symbolize(a));
                o["backtrace"] = frames;
            }
            recs.push_back(std::move(o));
        }
        doc["records"] = recs;
        doc["records_dropped"] = rs.dropped;
        doc["records_torn"] = rs.torn;
    } else {
        doc["records"] = nullptr;
        doc["records_note"] = "no rank file (memory only): see the earlier error";
    }
    std::string err;
    if (!write_file_atomic(rt_.file.base_path + ".dump.json", report::dump_json(doc), &err)) {
        if (!dump_write_failed_logged_) {
            dump_write_failed_logged_ = true;
            log().error("cannot write the dump ({})", err);
        }
        return false;
    }
    rt_.file.hdr->dumps_written.fetch_add(1);
    if (announce)
        log().info("dump written ({}): {}.dump.json", reason, rt_.file.base_path);
    else
        log().debug("dump written ({}): {}.dump.json", reason, rt_.file.base_path);
    return true;
}

}  // namespace ncw

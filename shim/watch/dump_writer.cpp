#include "shim/watch/dump_writer.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/suspicion.h"
#include "ncclwatch/version.h"
#include "read/rank_file.h"
#include "report/headline.h"
#include "report/report_json.h"
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

// "KIND: headline" (with `suffix`), then the summary and the evidence, indented.
void log_verdict(const JobResult& job, const CommResult& view, const verdict::Verdict& v, const char* indent,
                 const std::string& suffix = "") {
    const std::vector<std::string> lines = report::verdict_lines(job, view, v);
    log().error("{}{}{}", indent, lines.front(), suffix);
    for (size_t i = 1; i < lines.size(); ++i) log().error("      {}", lines[i]);
}

void log_verdicts(const JobResult* job, const CommResult* view) {
    if (!job || !view) return;
    for (const verdict::Verdict& v : view->verdicts) log_verdict(*job, *view, v, "  ");
}

json verdicts_json(const JobResult* job, const CommResult* view) {
    json out = json::array();
    if (job && view)
        for (const verdict::Verdict& v : view->verdicts)
            out.push_back(report::verdict_json_with_headline(*job, *view, v));
    return out;
}

// The communicator whose stall this one's cascades from (the start of the chain), if it is one.
const CommResult* initiating_of(const JobResult* job, const CommResult* view) {
    if (!job || !view) return nullptr;
    for (const verdict::Verdict& v : view->verdicts)
        if (v.role == verdict::Role::Cascade && v.caused_by_comm)
            for (const CommResult& c : job->comms)
                if (c.comm_id == v.caused_by_comm && &c != view) return &c;
    return nullptr;
}

// A communicator whose own verdict is no cascade but names a process that the job's initiating stall names too (one
// process busy outside NCCL holds both up, as rank 5 in slow_eval holds its tensor- and data-parallel groups): that
// stall is the same event, and it leads this report as well.
const CommResult* same_culprit_initiating(const JobResult* job, const CommResult* view) {
    if (!job || !view) return nullptr;
    using Proc = std::pair<std::string, int64_t>;
    auto procs = [](const CommResult& c, const verdict::Verdict& v) {
        std::vector<Proc> out;
        for (int cr : v.culprits)
            for (const auto& r : c.view.ranks)
                if (r.comm_rank == cr && r.pid) out.push_back({r.host, r.pid});
        return out;
    };
    std::vector<Proc> mine;
    for (const verdict::Verdict& v : view->verdicts)
        if (v.role == verdict::Role::None && v.kind != verdict::Kind::Straggler)
            for (auto& p : procs(*view, v)) mine.push_back(std::move(p));
    if (mine.empty()) return nullptr;
    for (const CommResult& c : job->comms) {
        if (&c == view) continue;
        for (const verdict::Verdict& v : c.verdicts)
            if (v.role == verdict::Role::Initiating)
                for (const Proc& p : procs(c, v))
                    if (std::find(mine.begin(), mine.end(), p) != mine.end()) return &c;
    }
    return nullptr;
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
        !write_failed_logged_) {
        write_failed_logged_ = true;
        log().error("cannot write the report file ({}); the report is on stderr only", err);
    }
    rt_.file.hdr->reports_written.fetch_add(1);
}

void DumpWriter::report_stall(const CommRuntime& cr, const JobResult* job, const CommResult* view, double stalled_for_s,
                              bool tracker_stuck, double suspected_at_s) {
    std::lock_guard<std::mutex> lock(mu_);
    const disk::CommSlot& s = *cr.slot.load();
    uint64_t waiting_in = s.coll_completed.load() + 1;
    // The counts in the engine's words, with what they are worth (lower bounds, proofs).
    verdict::RankCommState own;
    own.issued = s.coll_issued.load();
    own.returned = s.coll_returned.load();
    own.reached = s.coll_reached.load();
    own.completed = s.coll_completed.load();
    own.gpu_tracking = s.gpu_tracking.load() != 0;
    own.gpu_source = s.gpu_source.load();
    own.progress_exact = s.progress_exact.load() != 0;
    own.unreached = s.coll_unreached.load();
    own.uncompleted = s.coll_uncompleted.load();
    for (const auto& g : s.recent)
        if (g.seq.load() && (g.flags & disk::kFlagSampledOut)) {
            own.recent.emplace_back().flags = disk::kFlagSampledOut;  // "sampled", in the words of the counts
            break;
        }
    log().error(
        "STALL on communicator {:#018x} ({} ranks; this process is rank {}): no completion for {:.1f} s "
        "(NCCLWATCH_TIMEOUT_SEC={}); collectives {}",
        cr.comm_id, cr.nranks, cr.rank, stalled_for_s, rt_.cfg.timeout_sec, verdict::progress_words(own));
    // A cascade: the stall it waits because of leads, in the same words, so that this report names the cause first
    // (one lead per event); this communicator's own verdict follows as its consequence.
    const CommResult* cause = initiating_of(job, view);
    const bool same_culprit = !cause && (cause = same_culprit_initiating(job, view)) != nullptr;
    json verdicts = json::array();
    if (cause)
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating)
                verdicts.push_back(report::verdict_json_with_headline(*job, *cause, v));
    for (json& v : verdicts_json(job, view)) verdicts.push_back(std::move(v));
    const bool no_slot = cr.slot_index == 0xffff;
    const json event{{"type", "stall"},
                     {"comm_id", report::hex(cr.comm_id)},
                     {"no_comm_slot", no_slot},
                     {"waiting_in_seq", waiting_in},
                     {"stalled_for_s", stalled_for_s},
                     {"completion_poller_stuck", tracker_stuck},
                     {"suspected_at_s", suspected_at_s >= 0 ? json(suspected_at_s) : json(nullptr)},
                     {"missing_ranks", view ? json(view->missing) : json::array()},
                     {"verdicts", verdicts}};
    // One full report per node and event: the lowest local rank among this host's ranks that wait in the lead
    // stall prints it (every rank judges the same files the same way, so no rank has to ask another); the others,
    // and this process for an event it printed already, print one line that points to it.
    if (const char* where = full_report_elsewhere(job, cause ? cause : view)) {
        log().error("  {} [{}]",
                    report::verdict_lines(*job, cause ? *cause : *view, *lead_of(cause ? cause : view)).front(), where);
        append_event(event);
        return;
    }
    if (tracker_stuck)
        log().error(
            "  the GPU completion poller has not run for over 2 s (a CUDA query blocks?): GPU progress is "
            "unknown, the stall is reported from issue times");
    if (!view || view->verdicts.empty())
        log().error(
            "  no verdict from the ranks visible in {}: the lagging rank is probably on another node "
            "(run ncclwatch-collector analyze over every node's folder)",
            rt_.file.job_dir);
    if (no_slot)
        log().error(
            "  this communicator had no comm slot in the rank file (more than {} alive at once): watched here, and "
            "read by other ranks and analyze from the ring records",
            rt_.file.hdr->max_comms);
    if (cause) {
        if (same_culprit)
            log().error("  its culprit also holds up the stall on communicator {}, which stalled first:",
                        report::hex(cause->comm_id));
        else
            log().error("  it waits because of the stall on communicator {}, which stalled first:",
                        report::hex(cause->comm_id));
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating) log_verdict(*job, *cause, v, "  ");
        log().error(same_culprit ? "  this communicator:" : "  this communicator, a cascade of it:");
    }
    log_verdicts(job, view);
    append_event(event);
}

const verdict::Verdict* DumpWriter::lead_of(const CommResult* c) {
    if (!c || c->verdicts.empty()) return nullptr;
    for (const verdict::Verdict& v : c->verdicts)
        if (v.role == verdict::Role::Initiating) return &v;
    return &c->verdicts.front();
}

const char* DumpWriter::full_report_elsewhere(const JobResult* job, const CommResult* lead_comm) {
    const verdict::Verdict* lead = lead_of(lead_comm);
    if (!job || !lead) return nullptr;
    const auto key = std::make_pair(lead_comm->comm_id, lead->seq);
    if (std::find(printed_leads_.begin(), printed_leads_.end(), key) != printed_leads_.end())
        return "printed in full above by this process";
    const verdict::RankCommState* reporter = nullptr;
    auto order = [](const verdict::RankCommState& r) { return r.local_rank >= 0 ? r.local_rank : r.global_rank; };
    for (int w : lead->waiting)
        for (const auto& r : lead_comm->view.ranks)
            if (r.comm_rank == w && r.host == rt_.id.host && (!reporter || order(r) < order(*reporter))) reporter = &r;
    if (reporter && reporter->pid != rt_.id.pid) {
        where_ =
            fmt::format("the full report: local rank {} (pid {}) on this host, in its stderr and {}", order(*reporter),
                        reporter->pid,
                        reporter->file.empty() ? std::string("its .report.json")
                                               : reporter->file.substr(0, reporter->file.size() - 4) + ".report.json");
        return where_.c_str();
    }
    printed_leads_.push_back(key);  // this process prints it now
    return nullptr;
}

void DumpWriter::report_suspected(const CommRuntime& cr, const JobResult* job, const CommResult* view, double waited_s,
                                  double suspect_after_s, uint64_t gap_p99_ns) {
    std::lock_guard<std::mutex> lock(mu_);
    const disk::CommSlot& s = *cr.slot.load();
    const std::string why = fmt::format(
        "no completion on communicator {:#018x} for {:.1f} s (this process is rank {} of {}), past max({:g} x its p99 "
        "gap between completions ({:.1f} ms), {:g} s) = {:.1f} s; a STALL at NCCLWATCH_TIMEOUT_SEC={} unless it moves",
        cr.comm_id, waited_s, cr.rank, cr.nranks, verdict::kSuspectFactor, gap_p99_ns / 1e6, verdict::kSuspectFloorS,
        suspect_after_s, rt_.cfg.timeout_sec);
    json verdicts = json::array();
    if (job && view && !view->suspected.empty()) {
        // One line: the lead verdict as every report words it ("SUSPECTED KIND: ..."), then why.
        log().warn("{} [{}]", report::verdict_lines(*job, *view, view->suspected.front()).front(), why);
        for (const verdict::Verdict& v : view->suspected)
            verdicts.push_back(report::verdict_json_with_headline(*job, *view, v));
    } else {
        log().warn(
            "SUSPECTED stall: {}; collectives issued #{}, GPU-reached #{}, completed #{} (no rank file to "
            "judge it by)",
            why, s.coll_issued.load(), s.coll_reached.load(), s.coll_completed.load());
    }
    append_event(json{{"type", "suspected"},
                      {"comm_id", report::hex(cr.comm_id)},
                      {"waiting_in_seq", s.coll_completed.load() + 1},
                      {"stalled_for_s", waited_s},
                      {"suspect_after_s", suspect_after_s},
                      {"completion_gap_p99_s", gap_p99_ns / 1e9},
                      {"timeout_s", rt_.cfg.timeout_sec},
                      {"verdicts", verdicts}});
}

void DumpWriter::report_init_suspected(const disk::CommSlot& slot, const JobResult& job, const CommResult& view,
                                       double waited_s) {
    std::lock_guard<std::mutex> lock(mu_);
    json verdicts = json::array();
    for (const verdict::Verdict& v : view.suspected)
        verdicts.push_back(report::verdict_json_with_headline(job, view, v));
    // One line, as a stall's suspicion: the verdict as every report words it, then why.
    log().warn(
        "{} [communicator {:#018x} initialising for {:.1f} s (this process is rank {}); an INIT_HANG at "
        "NCCLWATCH_TIMEOUT_SEC={} unless it finishes]",
        report::verdict_lines(job, view, view.suspected.front()).front(), slot.comm_id, waited_s, slot.rank,
        rt_.cfg.timeout_sec);
    append_event(json{{"type", "suspected"},
                      {"comm_id", report::hex(slot.comm_id)},
                      {"init", true},
                      {"stalled_for_s", waited_s},
                      {"suspect_after_s", verdict::kInitSuspectS},
                      {"timeout_s", rt_.cfg.timeout_sec},
                      {"verdicts", std::move(verdicts)}});
}

void DumpWriter::report_init_hang(const disk::CommSlot& slot, const JobResult* job, const CommResult* view,
                                  double waited_s) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> entered;
    if (view)
        for (const verdict::RankCommState& r : view->view.ranks) entered.push_back(r.comm_rank);
    const verdict::Verdict* v = nullptr;
    if (view)
        for (const verdict::Verdict& x : view->verdicts)
            if (x.kind == verdict::Kind::InitHang) v = &x;
    if (v && job) {
        // The engine's verdict: who entered, who finished, who never appeared, and the seed checklist.
        log_verdict(*job, *view, *v, "", fmt::format(" (this process is rank {})", slot.rank));
        append_event(json{{"type", "init_hang"},
                          {"comm_id", report::hex(slot.comm_id)},
                          {"waited_s", waited_s},
                          {"entered", entered},
                          {"not_seen", json(view->missing)},
                          {"verdicts", json::array({report::verdict_json_with_headline(*job, *view, *v)})}});
        return;
    }
    log().error(
        "INIT_HANG: communicator {:#018x} ({} ranks; this process is rank {}) has been initialising for "
        "{:.1f} s; ranks seen entering init on this node: {}; not seen: {}",
        slot.comm_id, slot.nranks, slot.rank, waited_s, report::format_ranks(entered),
        view ? report::format_ranks(view->missing) : std::string("unknown"));
    append_event(json{{"type", "init_hang"},
                      {"comm_id", report::hex(slot.comm_id)},
                      {"waited_s", waited_s},
                      {"entered", entered},
                      {"not_seen", view ? json(view->missing) : json(nullptr)},
                      {"verdicts", json::array()}});
}

void DumpWriter::report_mismatch(const JobResult& job, const CommResult& view, const verdict::Verdict& v) {
    std::lock_guard<std::mutex> lock(mu_);
    log_verdict(job, view, v, "");
    json verdicts = json::array({report::verdict_json_with_headline(job, view, v)});
    // A drift's report carries its consequences (the MISMATCHes it explains) after it.
    if (v.drift)
        for (const verdict::Verdict& x : view.verdicts)
            if (x.consequence) {
                log_verdict(job, view, x, "  ");
                verdicts.push_back(report::verdict_json_with_headline(job, view, x));
            }
    append_event(json{{"type", v.drift ? "drift" : "mismatch"},
                      {"comm_id", report::hex(view.comm_id)},
                      {"verdicts", std::move(verdicts)}});
}

void DumpWriter::report_straggler(const JobResult& job, const CommResult& view, const verdict::Verdict& v) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::vector<std::string> lines = report::verdict_lines(job, view, v);
    log().warn("{}", lines.front());
    for (size_t i = 1; i < lines.size(); ++i) log().warn("      {}", lines[i]);
    append_event(json{{"type", "straggler"},
                      {"comm_id", report::hex(view.comm_id)},
                      {"verdicts", json::array({report::verdict_json_with_headline(job, view, v)})}});
}

void DumpWriter::report_recovered(const CommRuntime& cr, double waited_s, bool by_error, bool suspicion_only) {
    std::lock_guard<std::mutex> lock(mu_);
    const char* what = suspicion_only ? " (suspected, never a stall)" : "";
    if (by_error)
        log().error(
            "ENDED: the stalled operation on communicator {:#018x} returned an error after {:.1f} s{} (an abort or "
            "revoke here or on a peer, or an error inside NCCL); the report above stands",
            cr.comm_id, waited_s, what);
    else
        log().warn("RECOVERED: communicator {:#018x} made progress again after {:.1f} s{}", cr.comm_id, waited_s, what);
    append_event(json{{"type", by_error ? "ended_by_error" : "recovered"},
                      {"comm_id", report::hex(cr.comm_id)},
                      {"stalled_for_s", waited_s},
                      {"suspected_only", suspicion_only}});
}

void DumpWriter::report_final(const char* why, const JobResult* job, const std::vector<const CommResult*>& comms) {
    std::lock_guard<std::mutex> lock(mu_);
    if (comms.empty()) {
        log().warn("FINAL ({}): no stall and no rank gone before this one", why);
        append_event(json{{"type", "final"},
                          {"reason", why},
                          {"comm_id", nullptr},
                          {"missing_ranks", json::array()},
                          {"verdicts", json::array()}});
        return;
    }
    // One event, as one report: the lead's communicator first (the watchdog orders them), then the others'.
    json verdicts = json::array();
    for (const CommResult* c : comms) {
        log().error("FINAL ({}) on communicator {}:", why, report::hex(c->comm_id));
        log_verdicts(job, c);
        for (json& v : verdicts_json(job, c)) verdicts.push_back(std::move(v));
    }
    append_event(json{{"type", "final"},
                      {"reason", why},
                      {"comm_id", report::hex(comms.front()->comm_id)},
                      {"missing_ranks", comms.front()->missing},
                      {"verdicts", std::move(verdicts)}});
}

void DumpWriter::write_dump(const char* reason, disk::PyStacksReason py_reason, bool capture_py) {
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
        if (!write_failed_logged_) {
            write_failed_logged_ = true;
            log().error("cannot write the dump ({})", err);
        }
        return;
    }
    rt_.file.hdr->dumps_written.fetch_add(1);
    log().info("dump written ({}): {}.dump.json", reason, rt_.file.base_path);
}

}  // namespace ncw

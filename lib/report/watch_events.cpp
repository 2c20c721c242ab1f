#include "report/watch_events.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "engine/suspicion.h"
#include "engine/verdict_text.h"
#include "report/headline.h"
#include "report/report_json.h"

namespace ncw::report {

using json = nlohmann::json;

namespace {

// "KIND: headline" (with `suffix`) after `indent`, then the summary and the evidence, indented.
void add_verdict(std::vector<std::string>& out, const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                 const std::string& indent, const std::string& suffix = "") {
    const std::vector<std::string> lines = verdict_lines(job, view, v);
    out.push_back(indent + lines.front() + suffix);
    for (size_t i = 1; i < lines.size(); ++i)
        out.push_back(indent.size() > 2 ? indent + "    " + lines[i] : "      " + lines[i]);
}

void add_verdicts(std::vector<std::string>& out, const JobResult* job, const CommResult* view) {
    if (!job || !view) return;
    for (const verdict::Verdict& v : view->verdicts) add_verdict(out, *job, *view, v, "  ");
}

json verdicts_json(const JobResult* job, const CommResult* view) {
    json out = json::array();
    if (job && view)
        for (const verdict::Verdict& v : view->verdicts) out.push_back(verdict_json_with_headline(*job, *view, v));
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

// A communicator whose own verdict is no cascade but names a process that the job's initiating stall names too.
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

// The live collector's verdict as a report quotes it: its own words, said to be the job's.
std::string collector_line(const std::string& line) {
    return "  " + line + " [the job's verdict, from the live collector]";
}

// Where this node sees only part of the communicator, a report leads with the live collector's verdict (it sees
// every node), then says that what follows is this node's partial view.
void lead_with_collector(std::vector<std::string>& out, const std::string& job_verdict, const CommResult* view) {
    out.push_back(collector_line(job_verdict));
    out.push_back(
        view && !view->missing.empty()
            ? fmt::format("  this node's view (comm ranks {} not visible from here):", format_ranks(view->missing))
            : std::string("  this node's view:"));
}

}  // namespace

WatchEvent collector_verdict_event(const std::string& line) {
    WatchEvent e;
    e.lines.push_back("JOB VERDICT (live collector): " + line);
    e.event = json{{"type", "collector_verdict"}, {"line", line}};
    return e;
}

const verdict::Verdict* lead_of(const CommResult* c) {
    if (!c || c->verdicts.empty()) return nullptr;
    for (const verdict::Verdict& v : c->verdicts)
        if (v.role == verdict::Role::Initiating) return &v;
    return &c->verdicts.front();
}

const CommResult* leading_stall(const JobResult* job, const CommResult* view, bool* same_culprit) {
    const CommResult* cause = initiating_of(job, view);
    const bool same = !cause && (cause = same_culprit_initiating(job, view)) != nullptr;
    if (same_culprit) *same_culprit = same;
    return cause;
}

std::string full_report_pointer(int local_rank, int64_t pid, const std::string& report_json_path) {
    return fmt::format("the full report: local rank {} (pid {}) on this host, in its stderr and {}", local_rank, pid,
                       report_json_path.empty() ? std::string("its .report.json") : report_json_path);
}

WatchEvent stall_event(const JobResult* job, const CommResult* view, const OwnStall& own,
                       const std::string& elsewhere) {
    WatchEvent e;
    std::vector<std::string>& out = e.lines;
    out.push_back(fmt::format(
        "STALL on communicator {:#018x} ({} ranks; this process is rank {}): no completion for {:.1f} s "
        "(NCCLWATCH_TIMEOUT_SEC={}); collectives {}",
        own.comm_id, own.nranks, own.rank, own.stalled_for_s, own.timeout_s, verdict::progress_words(own.counts)));
    // A cascade: the stall it waits because of leads, in the same words, so that this report names the cause first
    // (one lead per event); this communicator's own verdict follows as its consequence.
    bool same_culprit = false;
    const CommResult* cause = leading_stall(job, view, &same_culprit);
    json verdicts = json::array();
    if (cause)
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating) verdicts.push_back(verdict_json_with_headline(*job, *cause, v));
    for (json& v : verdicts_json(job, view)) verdicts.push_back(std::move(v));
    e.event = json{{"type", "stall"},
                   {"comm_id", hex(own.comm_id)},
                   {"no_comm_slot", own.no_comm_slot},
                   {"waiting_in_seq", own.counts.completed + 1},
                   {"stalled_for_s", own.stalled_for_s},
                   {"completion_poller_stuck", own.tracker_stuck},
                   {"suspected_at_s", own.suspected_at_s >= 0 ? json(own.suspected_at_s) : json(nullptr)},
                   {"missing_ranks", view ? json(view->missing) : json::array()},
                   {"verdicts", std::move(verdicts)},
                   {"collector_verdict", own.job_verdict.empty() ? json(nullptr) : json(own.job_verdict)}};
    // The job's verdict from the live collector leads where this node's files name no culprit.
    if (!own.job_verdict.empty()) out.push_back(collector_line(own.job_verdict));
    const CommResult* lead_comm = cause ? cause : view;
    if (!elsewhere.empty() && job && lead_of(lead_comm)) {
        out.push_back(
            fmt::format("  {} [{}]", verdict_lines(*job, *lead_comm, *lead_of(lead_comm)).front(), elsewhere));
        return e;
    }
    if (own.tracker_stuck)
        out.push_back(
            "  the GPU completion poller has not run for over 2 s (a CUDA query blocks?): GPU progress is unknown, the "
            "stall is reported from issue times");
    if (!own.job_verdict.empty() && view && !view->verdicts.empty() &&
        view->verdicts.front().kind != verdict::Kind::Unknown && !view->missing.empty())
        out.push_back(
            fmt::format("  the ranks in {} see only part of the communicator (comm {} on other nodes): the "
                        "job's verdict above is the live collector's, which sees every node",
                        own.job_dir, verdict::ranks_word(view->missing)));
    else if (!own.job_verdict.empty())
        out.push_back(fmt::format("  the ranks in {} cannot name the culprit: it is on another node", own.job_dir));
    else if (view && view->verdicts.empty() && view->missing.empty())
        out.push_back(fmt::format(
            "  no verdict: every rank of the communicator is visible in {} and none is proven to hold it up yet (each "
            "is inside the op, the last to join it for less than the timeout)",
            own.job_dir));
    else if (!view || view->verdicts.empty())
        out.push_back(
            fmt::format("  no verdict from the ranks visible in {}: the lagging rank is probably on another node (run "
                        "ncclwatch-collector analyze over every node's folder)",
                        own.job_dir));
    if (own.no_comm_slot)
        out.push_back(fmt::format(
            "  this communicator had no comm slot in the rank file (more than {} alive at once): watched here, and "
            "read by other ranks and analyze from the ring records",
            own.max_comms));
    if (cause) {
        out.push_back(same_culprit ? fmt::format("  its culprit also holds up the stall on communicator {}, which "
                                                 "stalled first:",
                                                 hex(cause->comm_id))
                                   : fmt::format("  it waits because of the stall on communicator {}, which stalled "
                                                 "first:",
                                                 hex(cause->comm_id)));
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating) add_verdict(out, *job, *cause, v, "  ");
        out.push_back(same_culprit ? "  this communicator:" : "  this communicator, a cascade of it:");
    }
    add_verdicts(out, job, view);
    return e;
}

WatchEvent suspected_event(const JobResult* job, const CommResult* view, const OwnStall& own, double suspect_after_s,
                           uint64_t gap_p99_ns) {
    WatchEvent e;
    e.warning = true;
    const std::string why = fmt::format(
        "no completion on communicator {:#018x} for {:.1f} s (this process is rank {} of {}), past max({:g} x its p99 "
        "gap between completions ({:.1f} ms), {:g} s) = {:.1f} s; a STALL at NCCLWATCH_TIMEOUT_SEC={} unless it moves",
        own.comm_id, own.stalled_for_s, own.rank, own.nranks, verdict::kSuspectFactor, gap_p99_ns / 1e6,
        verdict::kSuspectFloorS, suspect_after_s, own.timeout_s);
    json verdicts = json::array();
    if (job && view && !view->suspected.empty()) {
        // One line: the lead verdict as every report words it ("SUSPECTED KIND: ..."), then why.
        e.lines.push_back(fmt::format("{} [{}]", verdict_lines(*job, *view, view->suspected.front()).front(), why));
        for (const verdict::Verdict& v : view->suspected)
            verdicts.push_back(verdict_json_with_headline(*job, *view, v));
    } else {
        e.lines.push_back(fmt::format(
            "SUSPECTED stall: {}; collectives issued #{}, GPU-reached #{}, completed #{} (no rank file to judge it by)",
            why, own.counts.issued, own.counts.reached, own.counts.completed));
    }
    e.event = json{{"type", "suspected"},
                   {"comm_id", hex(own.comm_id)},
                   {"waiting_in_seq", own.counts.completed + 1},
                   {"stalled_for_s", own.stalled_for_s},
                   {"suspect_after_s", suspect_after_s},
                   {"completion_gap_p99_s", gap_p99_ns / 1e9},
                   {"timeout_s", own.timeout_s},
                   {"verdicts", std::move(verdicts)}};
    return e;
}

WatchEvent init_suspected_event(const JobResult& job, const CommResult& view, uint64_t comm_id, int rank,
                                double waited_s, double timeout_s) {
    WatchEvent e;
    e.warning = true;
    json verdicts = json::array();
    for (const verdict::Verdict& v : view.suspected) verdicts.push_back(verdict_json_with_headline(job, view, v));
    // One line, as a stall's suspicion: the verdict as every report words it, then why.
    e.lines.push_back(
        fmt::format("{} [communicator {:#018x} initialising for {:.1f} s (this process is rank {}); an INIT_HANG at "
                    "NCCLWATCH_TIMEOUT_SEC={} unless it finishes]",
                    view.suspected.empty() ? std::string("SUSPECTED INIT_HANG")
                                           : verdict_lines(job, view, view.suspected.front()).front(),
                    comm_id, waited_s, rank, timeout_s));
    e.event = json{{"type", "suspected"},
                   {"comm_id", hex(comm_id)},
                   {"init", true},
                   {"stalled_for_s", waited_s},
                   {"suspect_after_s", verdict::kInitSuspectS},
                   {"timeout_s", timeout_s},
                   {"verdicts", std::move(verdicts)}};
    return e;
}

WatchEvent teardown_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank,
                               const char* call, double waited_s) {
    WatchEvent e;
    e.lines.push_back(
        fmt::format("TEARDOWN_HANG on communicator {:#018x} (this process is rank {}): inside {} for "
                    "{:.1f} s",
                    comm_id, rank, call, waited_s));
    // The communicator's verdicts, the lead worded in full (a stall that holds the teardown up leads it).
    json verdicts = json::array();
    if (job && view && !view->verdicts.empty()) {
        add_verdict(e.lines, *job, *view, view->verdicts.front(), "  ", "");
        for (const verdict::Verdict& v : view->verdicts) verdicts.push_back(verdict_json_with_headline(*job, *view, v));
    }
    e.event = json{{"type", "teardown_hang"},
                   {"comm_id", hex(comm_id)},
                   {"call", call},
                   {"waited_s", waited_s},
                   {"verdicts", std::move(verdicts)}};
    return e;
}

WatchEvent init_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank, int nranks,
                           double waited_s, const std::string& job_verdict) {
    WatchEvent e;
    std::vector<int> entered;
    if (view)
        for (const verdict::RankCommState& r : view->view.ranks) entered.push_back(r.comm_rank);
    const verdict::Verdict* v = nullptr;
    if (view)
        for (const verdict::Verdict& x : view->verdicts)
            if (x.kind == verdict::Kind::InitHang) v = &x;
    const json quoted = job_verdict.empty() ? json(nullptr) : json(job_verdict);
    if (!job_verdict.empty()) {
        e.lines.push_back(fmt::format(
            "INIT_HANG on communicator {:#018x} ({} ranks; this process is rank {}): initialising for {:.1f} s",
            comm_id, nranks, rank, waited_s));
        lead_with_collector(e.lines, job_verdict, view);
    }
    if (v && job) {
        // The engine's verdict: who entered, who finished, who never appeared, and the seed checklist.
        add_verdict(e.lines, *job, *view, *v, job_verdict.empty() ? "" : "  ",
                    fmt::format(" (this process is rank {})", rank));
        e.event = json{{"type", "init_hang"},
                       {"comm_id", hex(comm_id)},
                       {"waited_s", waited_s},
                       {"entered", entered},
                       {"not_seen", json(view->missing)},
                       {"verdicts", json::array({verdict_json_with_headline(*job, *view, *v)})},
                       {"collector_verdict", quoted}};
        return e;
    }
    e.lines.push_back(
        fmt::format("INIT_HANG: communicator {:#018x} ({} ranks; this process is rank {}) has been initialising for "
                    "{:.1f} s; ranks "
                    "seen entering init on this node: {}; not seen: {}",
                    comm_id, nranks, rank, waited_s, format_ranks(entered),
                    view ? format_ranks(view->missing) : std::string("unknown")));
    e.event = json{{"type", "init_hang"},
                   {"comm_id", hex(comm_id)},
                   {"waited_s", waited_s},
                   {"entered", entered},
                   {"not_seen", view ? json(view->missing) : json(nullptr)},
                   {"verdicts", json::array()},
                   {"collector_verdict", quoted}};
    return e;
}

WatchEvent mismatch_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                          const std::string& job_verdict) {
    WatchEvent e;
    const std::string indent = job_verdict.empty() ? "" : "  ";
    if (!job_verdict.empty()) {
        e.lines.push_back(fmt::format("{} on communicator {:#018x} ({} ranks): the ranks' collectives differ",
                                      v.drift ? "DRIFT" : "MISMATCH", view.comm_id, view.view.nranks));
        lead_with_collector(e.lines, job_verdict, &view);
    }
    add_verdict(e.lines, job, view, v, indent);
    json verdicts = json::array({verdict_json_with_headline(job, view, v)});
    // A drift's report carries its consequences (the MISMATCHes it explains) after it.
    if (v.drift)
        for (const verdict::Verdict& x : view.verdicts)
            if (x.consequence) {
                add_verdict(e.lines, job, view, x, indent + "  ");
                verdicts.push_back(verdict_json_with_headline(job, view, x));
            }
    e.event = json{{"type", v.drift ? "drift" : "mismatch"},
                   {"comm_id", hex(view.comm_id)},
                   {"verdicts", std::move(verdicts)},
                   {"collector_verdict", job_verdict.empty() ? json(nullptr) : json(job_verdict)}};
    return e;
}

WatchEvent straggler_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v) {
    WatchEvent e;
    e.warning = true;
    add_verdict(e.lines, job, view, v, "");
    e.event = json{{"type", "straggler"},
                   {"comm_id", hex(view.comm_id)},
                   {"verdicts", json::array({verdict_json_with_headline(job, view, v)})}};
    return e;
}

WatchEvent recovered_event(uint64_t comm_id, double waited_s, bool by_error, bool suspicion_only) {
    WatchEvent e;
    e.warning = !by_error;
    const char* what = suspicion_only ? " (suspected, never a stall)" : "";
    if (by_error)
        e.lines.push_back(fmt::format(
            "ENDED: the stalled operation on communicator {:#018x} returned an error after {:.1f} s{} (an abort or "
            "revoke here or on a peer, or an error inside NCCL); the report above stands",
            comm_id, waited_s, what));
    else
        e.lines.push_back(fmt::format("RECOVERED: communicator {:#018x} made progress again after {:.1f} s{}", comm_id,
                                      waited_s, what));
    e.event = json{{"type", by_error ? "ended_by_error" : "recovered"},
                   {"comm_id", hex(comm_id)},
                   {"stalled_for_s", waited_s},
                   {"suspected_only", suspicion_only}};
    return e;
}

WatchEvent final_event(const char* why, const JobResult* job, const std::vector<const CommResult*>& comms,
                       const std::string& job_verdict) {
    WatchEvent e;
    const json quoted = job_verdict.empty() ? json(nullptr) : json(job_verdict);
    if (comms.empty()) {
        e.warning = job_verdict.empty();
        if (job_verdict.empty()) {
            e.lines.push_back(fmt::format("FINAL ({}): no stall and no rank gone before this one", why));
        } else {
            // Nothing stands on this node's files, but the job had a verdict: the collector's, said once more.
            e.lines.push_back(fmt::format("FINAL ({}): no stall and no rank gone before this one on this node", why));
            e.lines.push_back(collector_line(job_verdict));
        }
        e.event = json{{"type", "final"},           {"reason", why},
                       {"comm_id", nullptr},        {"missing_ranks", json::array()},
                       {"verdicts", json::array()}, {"collector_verdict", quoted}};
        return e;
    }
    // One event, as one report: the lead's communicator first (the watchdog orders them), then the others'. Where
    // this node sees only part of the lead's communicator, the collector's verdict leads.
    json verdicts = json::array();
    for (const CommResult* c : comms) {
        e.lines.push_back(fmt::format("FINAL ({}) on communicator {}:", why, hex(c->comm_id)));
        if (c == comms.front() && !job_verdict.empty()) lead_with_collector(e.lines, job_verdict, c);
        add_verdicts(e.lines, job, c);
        for (json& v : verdicts_json(job, c)) verdicts.push_back(std::move(v));
    }
    e.event = json{{"type", "final"},
                   {"reason", why},
                   {"comm_id", hex(comms.front()->comm_id)},
                   {"missing_ranks", comms.front()->missing},
                   {"verdicts", std::move(verdicts)},
                   {"collector_verdict", quoted}};
    return e;
}

}  // namespace ncw::report

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

// How much an event's stderr form needs a line: its first line (the answer) always, then the lowest need first, in
// the event's own order (report/watch_events.h).
enum Need : int {
    kAnswer = 0,
    kSummary,       // the lead verdict's account in plain words
    kOwn,           // this process's stall, and what this node can or cannot see
    kVerdictLine,   // the other verdicts' lines, and what ties them to the lead
    kEvidence,      // the lead's evidence, other than the ranks' rows
    kCulpritRow,    // the lead's culprits' rows
    kOtherSummary,  // the other verdicts' accounts
    kOtherEvidence,
    kRow,  // every other rank's row: the table is in the report file
};

// An event's lines before the stderr form is chosen: the first one added is the answer.
struct Draft {
    std::vector<std::pair<std::string, int>> lines;
    void add(std::string s, int need) { lines.emplace_back(std::move(s), lines.empty() ? kAnswer : need); }
};

// The stderr form of `e` from its draft: the answer, then what fits of the rest (`budget` lines, less the one that says
// where the rest is when some is left out), the most needed first, shown in their order; the rest into `more`.
void choose(WatchEvent& e, size_t budget) {
    e.lines.clear();
    e.more.clear();
    const auto& lines = e.draft;
    if (lines.empty()) return;
    const size_t rest = lines.size() - 1;
    if (rest > budget && e.say_more && budget > 0) --budget;  // the last line says where the others are
    std::vector<size_t> order;
    for (size_t i = 1; i < lines.size(); ++i) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lines[a].second < lines[b].second; });
    // The other ranks' rows are a table: all of it or none (a few rows of it would say nothing of the others).
    const size_t rows =
        size_t(std::count_if(lines.begin() + 1, lines.end(), [](const auto& l) { return l.second == kRow; }));
    if (rows && rest - rows < budget && rest > budget)
        order.erase(std::remove_if(order.begin(), order.end(), [&](size_t i) { return lines[i].second == kRow; }),
                    order.end());
    std::vector<bool> shown(lines.size(), false);
    shown[0] = true;
    for (size_t k = 0; k < order.size() && k < budget; ++k) shown[order[k]] = true;
    for (size_t i = 0; i < lines.size(); ++i) (shown[i] ? e.lines : e.more).push_back(lines[i].first);
}

// The event, its stderr form chosen with `budget` lines of evidence (kEvidenceLines by default).
// say_more: the writer ends the lines with more_lines_note (false: the line says where the others are itself).
WatchEvent finish(Draft d, bool warning, json event, size_t budget = kEvidenceLines, bool say_more = true) {
    WatchEvent e;
    e.warning = warning;
    e.event = std::move(event);
    e.say_more = say_more;
    e.draft = std::move(d.lines);
    choose(e, budget);
    return e;
}

// The comm rank whose row of state (engine/verdict_text.h rank_state_line: "rank 2 (global 2, ...): issued #9, ...")
// `line` is; -1: not a row.
int row_rank(const CommResult& c, const std::string& line) {
    for (const verdict::RankCommState& r : c.view.ranks) {
        const std::string head = verdict::rank_id(r) + ": issued #";
        if (line.compare(0, head.size(), head) == 0) return r.comm_rank;
    }
    return -1;
}

// "KIND: headline" (with `suffix`) after `indent`, then the summary and the evidence, indented; `lead`: the verdict
// the event leads with (its account and evidence are the most needed).
void add_verdict(Draft& d, const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                 const std::string& indent, bool lead, const std::string& suffix = "") {
    const std::vector<std::string> lines = verdict_lines(job, view, v);
    d.add(indent + lines.front() + suffix, kVerdictLine);
    // Its account and evidence under it: two more spaces under a first line, four under one already indented.
    const std::string inner = indent.empty() ? std::string("  ") : indent + "    ";
    if (!lines[1].empty()) d.add(inner + lines[1], lead ? kSummary : kOtherSummary);
    for (size_t i = 2; i < lines.size(); ++i) {
        const int rank = row_rank(view, v.evidence[i - 2]);
        const bool culprit = std::find(v.culprits.begin(), v.culprits.end(), rank) != v.culprits.end();
        d.add(inner + lines[i], rank < 0 ? (lead ? kEvidence : kOtherEvidence) : lead && culprit ? kCulpritRow : kRow);
    }
}

void add_verdicts(Draft& d, const JobResult* job, const CommResult* view, const verdict::Verdict* skip = nullptr) {
    if (!job || !view) return;
    for (const verdict::Verdict& v : view->verdicts)
        if (&v != skip) add_verdict(d, *job, *view, v, "  ", false);
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

// The live collector's verdict as a report leads with it: its own words, said to be the job's.
std::string collector_line(const std::string& line) { return line + " [the job's verdict, from the live collector]"; }

// Where this node sees only part of the communicator, what follows the live collector's verdict (it sees every node)
// is this node's partial view.
std::string partial_view_line(const CommResult* view) {
    return view && !view->missing.empty()
               ? fmt::format("  this node's view (comm ranks {} not visible from here):", format_ranks(view->missing))
               : std::string("  this node's view:");
}

}  // namespace

void refit(WatchEvent& e, size_t evidence_lines) {
    if (!e.draft.empty()) choose(e, evidence_lines);
}

std::string more_lines_note(size_t n, const std::string& report_json_path) {
    return fmt::format("  {} more {} in {} (NCCLWATCH_LOG_LEVEL=debug prints them here)", n, n == 1 ? "line" : "lines",
                       report_json_path);
}

std::string node_dumps_line(const std::string& reason, size_t written, size_t asked, const std::string& pattern,
                            const std::vector<int>& late_ranks) {
    if (written >= asked)
        return fmt::format("dumps written ({}): {} of this host, {}", reason,
                           asked == 1 ? std::string("its one rank") : fmt::format("all {} ranks", asked), pattern);
    return fmt::format("dumps written ({}): {} of this host's {} ranks, {} ({} wrote none yet)", reason, written, asked,
                       pattern, verdict::ranks_word(late_ranks));
}

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

WatchEvent stall_event(const JobResult* job, const CommResult* view, const OwnStall& own, const Elsewhere& elsewhere) {
    const std::string stall = fmt::format(
        "STALL on communicator {:#018x} ({} ranks; this process is rank {}): no completion for {:.1f} s "
        "(NCCLWATCH_TIMEOUT_SEC={}); collectives {}",
        own.comm_id, own.nranks, own.rank, own.stalled_for_s, own.timeout_s, verdict::progress_words(own.counts));
    // A cascade: the stall it waits because of leads, in the same words, so that this report names the cause first
    // (one lead per event); this communicator's own verdict follows as its consequence.
    bool same_culprit = false;
    const CommResult* cause = leading_stall(job, view, &same_culprit);
    json verdicts = json::array();
    if (cause)
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating) verdicts.push_back(verdict_json_with_headline(*job, *cause, v));
    for (json& v : verdicts_json(job, view)) verdicts.push_back(std::move(v));
    json pointer = nullptr;
    if (elsewhere.pid)
        pointer = json{{"local_rank", elsewhere.local_rank},
                       {"pid", elsewhere.pid},
                       {"report_json", elsewhere.report_json.empty() ? json(nullptr) : json(elsewhere.report_json)}};
    json event{{"type", "stall"},
               {"comm_id", hex(own.comm_id)},
               {"no_comm_slot", own.no_comm_slot},
               {"waiting_in_seq", own.counts.completed + 1},
               {"stalled_for_s", own.stalled_for_s},
               {"completion_poller_stuck", own.tracker_stuck},
               {"suspected_at_s", own.suspected_at_s >= 0 ? json(own.suspected_at_s) : json(nullptr)},
               {"missing_ranks", view ? json(view->missing) : json::array()},
               {"verdicts", std::move(verdicts)},
               {"collector_verdict", own.job_verdict.empty() ? json(nullptr) : json(own.job_verdict)},
               {"full_report", std::move(pointer)}};
    const CommResult* lead_comm = cause ? cause : view;
    const verdict::Verdict* lead = job ? lead_of(lead_comm) : nullptr;
    const bool collector_leads = !own.job_verdict.empty();
    Draft d;
    if (elsewhere.any() && (lead || collector_leads)) {
        // Another rank of this host prints the full report (or this process did): one line, the lead and where.
        const std::string where = elsewhere.printed_here
                                      ? std::string("printed in full above by this process")
                                      : full_report_pointer(elsewhere.local_rank, elsewhere.pid, elsewhere.report_json);
        if (collector_leads)
            d.add(fmt::format("{} [the job's verdict, from the live collector; {}]", own.job_verdict, where), kAnswer);
        else
            d.add(fmt::format("{} [{}]", verdict_lines(*job, *lead_comm, *lead).front(), where), kAnswer);
        d.add("  " + stall, kOwn);
        if (lead) add_verdict(d, *job, *lead_comm, *lead, "  ", false);
        return finish(std::move(d), false, std::move(event), 0, false);
    }
    // The answer first: the job's verdict from the live collector where this node's files cannot name the culprit,
    // else the lead (for a cascade, the stall it waits because of), else the stall itself.
    if (collector_leads)
        d.add(collector_line(own.job_verdict), kAnswer);
    else if (lead)
        add_verdict(d, *job, *lead_comm, *lead, "", true);
    else
        d.add(stall, kAnswer);
    if (collector_leads || lead) d.add("  " + stall, kOwn);
    if (own.tracker_stuck)
        d.add(
            "  the GPU completion poller has not run for over 2 s (a CUDA query blocks?): GPU progress is unknown, the "
            "stall is reported from issue times",
            kOwn);
    if (collector_leads && view && !view->verdicts.empty() && view->verdicts.front().kind != verdict::Kind::Unknown &&
        !view->missing.empty())
        d.add(fmt::format("  the ranks in {} see only part of the communicator (comm {} on other nodes): the job's "
                          "verdict above is the live collector's, which sees every node",
                          own.job_dir, verdict::ranks_word(view->missing)),
              kOwn);
    else if (collector_leads)
        d.add(fmt::format("  the ranks in {} cannot name the culprit: it is on another node", own.job_dir), kOwn);
    else if (view && view->verdicts.empty() && view->missing.empty())
        d.add(fmt::format("  no verdict: every rank of the communicator is visible in {} and none is proven to hold it "
                          "up yet (each is inside the op, the last to join it for less than the timeout)",
                          own.job_dir),
              kOwn);
    else if (!view || view->verdicts.empty())
        d.add(fmt::format("  no verdict from the ranks visible in {}: the lagging rank is probably on another node "
                          "(run ncclwatch-collector analyze over every node's folder)",
                          own.job_dir),
              kOwn);
    if (own.no_comm_slot)
        d.add(fmt::format("  this communicator had no comm slot in the rank file (more than {} alive at once): watched "
                          "here, and read by other ranks and analyze from the ranks' ring records",
                          own.max_comms),
              kOwn);
    // Below the lead: what this node sees (under the collector's verdict, all of it), the cause's other initiating
    // verdicts, then this communicator's own, as the consequence of a cause.
    if (collector_leads && view && !view->verdicts.empty()) d.add(partial_view_line(view), kVerdictLine);
    const verdict::Verdict* said = collector_leads ? nullptr : lead;
    if (cause) {
        for (const verdict::Verdict& v : cause->verdicts)
            if (v.role == verdict::Role::Initiating && &v != said) add_verdict(d, *job, *cause, v, "  ", false);
        d.add(same_culprit
                  ? fmt::format("  communicator {} (this process's) is held up by the same culprit:", hex(own.comm_id))
                  : fmt::format("  communicator {} (this process's) waits because of the stall on {}, which "
                                "stalled first (a cascade):",
                                hex(own.comm_id), hex(cause->comm_id)),
              kVerdictLine);
        add_verdicts(d, job, view);
    } else {
        add_verdicts(d, job, view, said);
    }
    return finish(std::move(d), false, std::move(event));
}

WatchEvent suspected_event(const JobResult* job, const CommResult* view, const OwnStall& own, double suspect_after_s,
                           uint64_t gap_p99_ns) {
    const std::string why = fmt::format(
        "no completion on communicator {:#018x} for {:.1f} s (this process is rank {} of {}), past max({:g} x its p99 "
        "gap between completions ({:.1f} ms), {:g} s) = {:.1f} s; a STALL at NCCLWATCH_TIMEOUT_SEC={} unless it moves",
        own.comm_id, own.stalled_for_s, own.rank, own.nranks, verdict::kSuspectFactor, gap_p99_ns / 1e6,
        verdict::kSuspectFloorS, suspect_after_s, own.timeout_s);
    json verdicts = json::array();
    Draft d;
    if (job && view && !view->suspected.empty()) {
        // One line: the lead verdict as every report words it ("SUSPECTED KIND: ..."), then why.
        d.add(fmt::format("{} [{}]", verdict_lines(*job, *view, view->suspected.front()).front(), why), kAnswer);
        for (const verdict::Verdict& v : view->suspected)
            verdicts.push_back(verdict_json_with_headline(*job, *view, v));
    } else {
        d.add(fmt::format(
                  "SUSPECTED stall: {}; collectives issued #{}, GPU-reached #{}, completed #{} (no rank file to judge "
                  "it by)",
                  why, own.counts.issued, own.counts.reached, own.counts.completed),
              kAnswer);
    }
    return finish(std::move(d), true,
                  json{{"type", "suspected"},
                       {"comm_id", hex(own.comm_id)},
                       {"waiting_in_seq", own.counts.completed + 1},
                       {"stalled_for_s", own.stalled_for_s},
                       {"suspect_after_s", suspect_after_s},
                       {"completion_gap_p99_s", gap_p99_ns / 1e9},
                       {"timeout_s", own.timeout_s},
                       {"verdicts", std::move(verdicts)}});
}

WatchEvent init_suspected_event(const JobResult& job, const CommResult& view, uint64_t comm_id, int rank,
                                double waited_s, double timeout_s) {
    json verdicts = json::array();
    for (const verdict::Verdict& v : view.suspected) verdicts.push_back(verdict_json_with_headline(job, view, v));
    // One line, as a stall's suspicion: the verdict as every report words it, then why.
    Draft d;
    d.add(fmt::format("{} [communicator {:#018x} initialising for {:.1f} s (this process is rank {}); an INIT_HANG at "
                      "NCCLWATCH_TIMEOUT_SEC={} unless it finishes]",
                      view.suspected.empty() ? std::string("SUSPECTED INIT_HANG")
                                             : verdict_lines(job, view, view.suspected.front()).front(),
                      comm_id, waited_s, rank, timeout_s),
          kAnswer);
    return finish(std::move(d), true,
                  json{{"type", "suspected"},
                       {"comm_id", hex(comm_id)},
                       {"init", true},
                       {"stalled_for_s", waited_s},
                       {"suspect_after_s", verdict::kInitSuspectS},
                       {"timeout_s", timeout_s},
                       {"verdicts", std::move(verdicts)}});
}

WatchEvent teardown_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank,
                               const char* call, double waited_s) {
    const std::string own =
        fmt::format("TEARDOWN_HANG on communicator {:#018x} (this process is rank {}): inside {} for {:.1f} s", comm_id,
                    rank, call, waited_s);
    // The communicator's lead verdict first, worded in full (a stall that holds the teardown up leads it); else the
    // bare facts.
    json verdicts = json::array();
    Draft d;
    if (job && view && !view->verdicts.empty()) {
        add_verdict(d, *job, *view, view->verdicts.front(), "", true);
        d.add("  " + own, kOwn);
        for (const verdict::Verdict& v : view->verdicts) verdicts.push_back(verdict_json_with_headline(*job, *view, v));
    } else {
        d.add(own, kAnswer);
    }
    return finish(std::move(d), false,
                  json{{"type", "teardown_hang"},
                       {"comm_id", hex(comm_id)},
                       {"call", call},
                       {"waited_s", waited_s},
                       {"verdicts", std::move(verdicts)}});
}

WatchEvent init_hang_event(const JobResult* job, const CommResult* view, uint64_t comm_id, int rank, int nranks,
                           double waited_s, const std::string& job_verdict) {
    std::vector<int> entered;
    if (view)
        for (const verdict::RankCommState& r : view->view.ranks) entered.push_back(r.comm_rank);
    const verdict::Verdict* v = nullptr;
    if (view)
        for (const verdict::Verdict& x : view->verdicts)
            if (x.kind == verdict::Kind::InitHang) v = &x;
    const json quoted = job_verdict.empty() ? json(nullptr) : json(job_verdict);
    Draft d;
    if (!job_verdict.empty()) {
        // The job's verdict leads: this node sees only part of the communicator.
        d.add(collector_line(job_verdict), kAnswer);
        d.add(fmt::format("  INIT_HANG on communicator {:#018x} ({} ranks; this process is rank {}): initialising for "
                          "{:.1f} s",
                          comm_id, nranks, rank, waited_s),
              kOwn);
        if (v && job) d.add(partial_view_line(view), kVerdictLine);
    }
    if (v && job) {
        // The engine's verdict: who entered, who finished, who never appeared, and the seed checklist.
        add_verdict(d, *job, *view, *v, job_verdict.empty() ? "" : "  ", job_verdict.empty(),
                    fmt::format(" (this process is rank {})", rank));
        return finish(std::move(d), false,
                      json{{"type", "init_hang"},
                           {"comm_id", hex(comm_id)},
                           {"waited_s", waited_s},
                           {"entered", entered},
                           {"not_seen", json(view->missing)},
                           {"verdicts", json::array({verdict_json_with_headline(*job, *view, *v)})},
                           {"collector_verdict", quoted}});
    }
    d.add(
        fmt::format("{}INIT_HANG: communicator {:#018x} ({} ranks; this process is rank {}) has been initialising for "
                    "{:.1f} s; ranks seen entering init on this node: {}; not seen: {}",
                    job_verdict.empty() ? "" : "  ", comm_id, nranks, rank, waited_s, format_ranks(entered),
                    view ? format_ranks(view->missing) : std::string("unknown")),
        kOwn);
    return finish(std::move(d), false,
                  json{{"type", "init_hang"},
                       {"comm_id", hex(comm_id)},
                       {"waited_s", waited_s},
                       {"entered", entered},
                       {"not_seen", view ? json(view->missing) : json(nullptr)},
                       {"verdicts", json::array()},
                       {"collector_verdict", quoted}});
}

WatchEvent mismatch_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v,
                          const std::string& job_verdict, const Elsewhere& elsewhere) {
    Draft d;
    const std::string indent = job_verdict.empty() ? "" : "  ";
    if (!job_verdict.empty()) {
        // The job's verdict leads: this node sees only part of the communicator.
        d.add(collector_line(job_verdict), kAnswer);
        d.add(fmt::format("  {} on communicator {:#018x} ({} ranks): the ranks' collectives differ",
                          v.drift ? "DRIFT" : "MISMATCH", view.comm_id, view.view.nranks),
              kOwn);
        d.add(partial_view_line(&view), kVerdictLine);
    }
    add_verdict(d, job, view, v, indent, job_verdict.empty());
    json verdicts = json::array({verdict_json_with_headline(job, view, v)});
    // A drift's report carries its consequences (the MISMATCHes it explains) after it.
    if (v.drift)
        for (const verdict::Verdict& x : view.verdicts)
            if (x.consequence) {
                add_verdict(d, job, view, x, indent + "  ", false);
                verdicts.push_back(verdict_json_with_headline(job, view, x));
            }
    json event{{"type", v.drift ? "drift" : "mismatch"},
               {"comm_id", hex(view.comm_id)},
               {"verdicts", std::move(verdicts)},
               {"collector_verdict", job_verdict.empty() ? json(nullptr) : json(job_verdict)}};
    if (elsewhere.pid) {
        // Another rank of this host prints the full report: its first line, and where.
        d.lines.front().first +=
            " [" + full_report_pointer(elsewhere.local_rank, elsewhere.pid, elsewhere.report_json) + "]";
        return finish(std::move(d), false, std::move(event), 0, false);
    }
    return finish(std::move(d), false, std::move(event));
}

WatchEvent straggler_event(const JobResult& job, const CommResult& view, const verdict::Verdict& v) {
    Draft d;
    add_verdict(d, job, view, v, "", true);
    return finish(std::move(d), true,
                  json{{"type", "straggler"},
                       {"comm_id", hex(view.comm_id)},
                       {"verdicts", json::array({verdict_json_with_headline(job, view, v)})}});
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
    const json quoted = job_verdict.empty() ? json(nullptr) : json(job_verdict);
    Draft d;
    if (comms.empty()) {
        if (job_verdict.empty()) {
            d.add(fmt::format("FINAL ({}): no stall and no rank gone before this one", why), kAnswer);
        } else {
            // Nothing stands on this node's files, but the job had a verdict: the collector's, said once more.
            d.add(fmt::format("FINAL ({}): {}", why, collector_line(job_verdict)), kAnswer);
            d.add("  no stall and no rank gone before this one on this node", kOwn);
        }
        return finish(std::move(d), job_verdict.empty(),
                      json{{"type", "final"},
                           {"reason", why},
                           {"comm_id", nullptr},
                           {"missing_ranks", json::array()},
                           {"verdicts", json::array()},
                           {"collector_verdict", quoted}});
    }
    // One event, as one report: the lead's communicator first (the watchdog orders them), then the others'. The answer
    // first, said to be the final one: the collector's verdict where this node sees only part of the lead's
    // communicator, else the lead's.
    json verdicts = json::array();
    const verdict::Verdict* lead = job ? lead_of(comms.front()) : nullptr;
    if (!job_verdict.empty()) {
        d.add(fmt::format("FINAL ({}): {}", why, collector_line(job_verdict)), kAnswer);
    } else if (lead) {
        add_verdict(d, *job, *comms.front(), *lead, "", true);
        d.lines.front().first = fmt::format("FINAL ({}): {}", why, d.lines.front().first);
    }
    for (const CommResult* c : comms) {
        if (c != comms.front() || d.lines.empty())
            d.add(fmt::format("{}FINAL ({}) on communicator {}:", d.lines.empty() ? "" : "  ", why, hex(c->comm_id)),
                  kVerdictLine);
        if (c == comms.front() && !job_verdict.empty()) d.add(partial_view_line(c), kVerdictLine);
        add_verdicts(d, job, c, c == comms.front() && job_verdict.empty() ? lead : nullptr);
        for (json& v : verdicts_json(job, c)) verdicts.push_back(std::move(v));
    }
    return finish(std::move(d), false,
                  json{{"type", "final"},
                       {"reason", why},
                       {"comm_id", hex(comms.front()->comm_id)},
                       {"missing_ranks", comms.front()->missing},
                       {"verdicts", std::move(verdicts)},
                       {"collector_verdict", quoted}});
}

}  // namespace ncw::report

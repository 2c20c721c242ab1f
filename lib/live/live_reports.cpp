// The live collector's analysis and reports: the analysis as digests change, the report of new verdicts (text and JSON,
// in the verdicts' one voice: report/headline.h), the dump requests, and /metrics.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/suspicion.h"
#include "live/live_impl.h"
#include "ncclwatch/format.h"
#include "ncclwatch/version.h"
#include "read/safe_write.h"
#include "report/headline.h"
#include "report/metrics.h"
#include "report/report_json.h"
#include "report/report_text.h"

namespace ncw::live {

namespace {

using json = nlohmann::json;

// Job ids come from the network: keep a path component of safe characters only.
std::string safe_component(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 128)) out += (isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '_';
    if (out.empty() || out == "." || out == "..") out = "job";
    return out;
}

using report::clean;

std::string verdict_key(const verdict::Verdict& v) {
    // A straggler's seq moves on with every step: it is news once per communicator and rank.
    std::string k = v.kind == verdict::Kind::Straggler
                        ? fmt::format("{}|{:x}|", verdict::kind_name(v.kind), v.comm_id)
                        : fmt::format("{}|{:x}|{}|", verdict::kind_name(v.kind), v.comm_id, v.seq);
    for (int r : v.culprits) k += std::to_string(r) + ",";
    return k;
}

// A stall (as opposed to a mismatch, a drift found while nothing waits or a straggler, which hold nothing up).
bool is_stall(const verdict::Verdict& v) {
    return v.kind != verdict::Kind::Mismatch && v.kind != verdict::Kind::Straggler && !verdict::drift_only(v);
}

}  // namespace

// Whether something in the job may already be a verdict the analysis would report: an outstanding collective
// without progress for the timeout, an init running that long, a flagged stall or error, a connection lost past
// the grace. One pass over the snapshots, far cheaper than the analysis, so a stall is caught on the first tick
// after it passes the timeout while the full analysis (for mismatches) runs less often.
bool LiveServer::Impl::something_due(const Job& job, uint64_t now) const {
    const uint64_t timeout = uint64_t(opt.timeout_s * 1e9), grace = uint64_t(opt.dead_after_s * 1e9);
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        if (!r.conn_id && !r.bye && now - r.last_frame_ns >= grace) return true;
        for (const auto& c : job.snaps[i].comms) {
            if (c.stall_since_ns || c.async_error) return true;
            if (c.coll_issued > c.coll_completed) {
                const uint64_t since = std::max(c.t_last_progress_ns, c.t_last_issue_ns);
                // The timeout, or the rank's own suspicion threshold (the analysis judges the communicator's).
                const uint64_t suspect = uint64_t(verdict::suspect_after_s(c.completion_gap_p99_ns) * 1e9);
                if (since && now > since && (now - since >= timeout || (suspect && now - since >= suspect)))
                    return true;
            }
            if (c.state == uint32_t(disk::CommState::Initializing) && c.t_init_start_ns && now > c.t_init_start_ns &&
                now - c.t_init_start_ns >= timeout)
                return true;
        }
    }
    return false;
}

void LiveServer::Impl::maybe_analyze(uint64_t now) {
    for (auto& [id, job] : jobs) {
        // Never more than a third of the time in analysis, however large the job.
        const uint64_t cost = uint64_t(job->last_analysis_cost_s * 3e9);
        const uint64_t period = std::max(uint64_t(std::max(0.01, opt.analyze_period_s) * 1e9), cost);
        const uint64_t full_period = std::max(period, kIdleAnalysisNs);
        const uint64_t since = now - job->last_analysis_ns;
        if (since < period) continue;
        const bool run = (job->dirty && since >= full_period) ||
                         (job->dirty && (job->stall_reported_ns || !job->suspected.empty())) ||
                         since >= 4 * full_period || something_due(*job, now);
        if (run) analyze_job(*job, now);
    }
}

void LiveServer::Impl::analyze_job(Job& job, uint64_t now) {
    job.dirty = false;
    job.last_analysis_ns = now;
    // Connected ranks are alive now; a disconnected one ages from its last frame and is gone after dead_after_s.
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        job.snaps[i].header.heartbeat_mono_ns = r.conn_id ? now : r.last_frame_ns;
    }
    AnalysisOptions ao;
    ao.live = true;
    ao.now_mono_ns = now;
    ao.now_real_ns = time_base::clock_ns(CLOCK_REALTIME);
    ao.timeout_s = opt.timeout_s;
    ao.stale_after_s = opt.dead_after_s;
    const Analysis a = analyze(job.snaps, ao);
    last_analysis_s = double(mono_ns() - now) / 1e9;
    job.last_analysis_cost_s = last_analysis_s;
    ++st_analyses;

    job.named.clear();
    job.verdicts.clear();
    bool stalled = false, fresh = false;
    std::set<std::string> keys;
    for (const auto& ref : a.all_verdicts()) {
        const auto& v = *ref.verdict;
        job.verdicts.emplace(v.comm_id, verdict::kind_name(v.kind));
        if (v.kind == verdict::Kind::Straggler) {  // reported while the job runs, but it holds nothing up
            const std::string k = verdict_key(v);
            keys.insert(k);
            if (!job.reported.count(k)) fresh = true;
            continue;
        }
        auto& named = job.named[v.comm_id];
        named.first.insert(v.culprits.begin(), v.culprits.end());
        named.second.insert(v.waiting.begin(), v.waiting.end());
        stalled = stalled || is_stall(v);
        const std::string k = verdict_key(v);
        keys.insert(k);
        if (!job.reported.count(k)) fresh = true;
    }
    // Suspicions: /metrics says so while they last; the log says each once (the report is the stall's).
    job.suspected.clear();
    std::set<std::string> suspect_keys;
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms) {
            if (cr.suspected.empty()) continue;
            job.suspected.insert(cr.comm_id);
            const auto& v = cr.suspected.front();
            const std::string k = verdict_key(v);
            suspect_keys.insert(k);
            if (job.suspect_said.insert(k).second)
                log(fmt::format("job {}: {}", clean(job.id), report::verdict_lines(jr, cr, v).front()));
        }
    // A suspicion that ended (recovered, or became a stall) is news again if it comes back.
    for (auto it = job.suspect_said.begin(); it != job.suspect_said.end();)
        it = suspect_keys.count(*it) ? std::next(it) : job.suspect_said.erase(it);
    if (fresh) {
        job.reported.insert(keys.begin(), keys.end());
        report(job, a, now);
        if (stalled && !job.stall_reported_ns) job.stall_reported_ns = now;
    } else if (job.py_stacks_news && stalled && job.stall_reported_ns) {
        // The ranks' Python stacks came after the report (captured at its dump requests): the same report again,
        // with the frames, and no new requests.
        report(job, a, now, true);
    }
    job.py_stacks_news = false;
    if (!stalled && job.stall_reported_ns) {
        log(fmt::format("job {}: recovered: no stall any more ({:.1f} s after the report)", clean(job.id),
                        double(now - job.stall_reported_ns) / 1e9));
        job.stall_reported_ns = 0;
        // A later stall at the same place is news again; mismatches and stragglers stay reported once.
        for (auto it = job.reported.begin(); it != job.reported.end();)
            it = it->rfind("MISMATCH|", 0) == 0 || it->rfind("STRAGGLER|", 0) == 0 ? std::next(it)
                                                                                   : job.reported.erase(it);
    }
}

std::string LiveServer::Impl::clock_line(const Job& job) const {
    size_t exact = 0, est = 0;
    int64_t worst = 0;
    for (const auto& r : job.ranks) {
        if (r.clock.exact)
            ++exact;
        else if (r.clock.count) {
            ++est;
            worst = std::max(worst, r.clock.spread());
        }
    }
    return fmt::format(
        "clock offsets: {} rank(s) on this host's boot (exact), {} estimated by a one-way minimum filter over "
        "the last {} frames (each estimate is late by that rank's smallest one-way network delay; the "
        "widest window spread is {:.3f} ms)",
        exact, est, OffsetFilter::kWindow, double(worst) / 1e6);
}

void LiveServer::Impl::report(Job& job, const Analysis& a, uint64_t now, bool with_new_stacks) {
    ++st_reports;
    const auto refs = a.all_verdicts();
    const std::string job_name = job.id.empty() ? "(no job id)" : clean(job.id);
    const uint64_t real = time_base::clock_ns(CLOCK_REALTIME);
    std::string text;
    std::string first_line;
    for (const auto& ref : refs) {
        if (ref.verdict->kind == verdict::Kind::Straggler && !first_line.empty()) continue;
        const std::vector<std::string> lines = report::verdict_lines(*ref.job, *ref.comm, *ref.verdict);
        if (first_line.empty()) first_line = lines.front();
        text += lines.front() + "\n";
        for (size_t i = 1; i < lines.size(); ++i) text += "    " + lines[i] + "\n";
    }
    text = fmt::format("ncclwatch live report, job {}, {}{}\n", job_name, report::wall_time(real),
                       with_new_stacks ? " (again: the ranks' Python stacks came)" : "") +
           text;
    if (const auto lead = report::lead_verdict(a); lead.verdict) {
        const std::string py = report::python_section(*lead.comm, *lead.verdict, report::TextOptions{});
        if (!py.empty()) text += "Python stacks (the thread that issued NCCL calls; > the user's code)\n" + py;
    }
    text += clock_line(job) + "\n";
    const uint64_t job_now = a.jobs.empty() ? now : a.jobs.front().now_mono_ns;
    for (const auto& jr : a.jobs) {
        for (const auto& cr : jr.comms) {
            text += fmt::format("\ncomm {}{} ({} ranks{})\n", report::hex(cr.comm_id),
                                cr.name.empty() ? "" : " '" + clean(cr.name) + "'", cr.view.nranks,
                                cr.missing.empty() ? "" : ", missing " + format_ranks(cr.missing));
            text += fmt::format("  {:>6} {:>6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10}  {}\n", "rank", "global",
                                "host", "pid", "issued", "reached", "completed", "idle s", "state");
            size_t rows = 0;
            for (const auto& r : cr.view.ranks) {
                if (++rows > kMaxTableRows) {
                    text += fmt::format("  ... {} more ranks (see live-report.json)\n",
                                        cr.view.ranks.size() - kMaxTableRows);
                    break;
                }
                const double idle = r.t_last_progress_ns && job_now > r.t_last_progress_ns
                                        ? double(job_now - r.t_last_progress_ns) / 1e9
                                        : 0.0;
                const char* state = r.exited_clean     ? "exited"
                                    : !r.alive         ? "GONE"
                                    : r.stall_since_ns ? "stalled"
                                                       : "alive";
                text += fmt::format("  {:>6} {:>6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10.1f}  {}\n", r.comm_rank,
                                    r.global_rank, clean(r.host).substr(0, 24), r.pid, r.issued, r.reached, r.completed,
                                    idle, state);
            }
        }
    }

    // Text first: it is small (the table is capped) and what a person or a script watches for.
    const std::string comp = safe_component(job.id);
    const std::string dir = opt.out_dir.empty() ? "" : opt.out_dir + "/" + comp;
    // Nothing planted in the job folder (its name is the client's) is followed: read/safe_write.h.
    std::string why;
    const bool wrote = !dir.empty() && files::write_job_file(opt.out_dir, comp, "live-report.txt", text, false, &why);
    // Once per job (and rate-limited): a folder someone made unwritable must not fill the log.
    auto write_failed = [&](const std::string& what) {
        if (job.write_failure_logged) return;
        job.write_failure_logged = true;
        log_limited("report write", fmt::format("cannot write {}: {}", what, why));
    };
    if (!dir.empty() && !wrote) write_failed("the report into " + dir);
    if (!opt.quiet) {
        fwrite(text.data(), 1, text.size(), stdout);
        fflush(stdout);
    } else {
        log(fmt::format("job {}: {}", job_name, first_line));
    }

    json j;
    j["schema"] = "ncclwatch.live/1";
    j["ncclwatch_version"] = kVersionLine;
    j["job_id"] = job.id;
    j["time"] = report::wall_time(real);
    j["timeout_s"] = opt.timeout_s;
    j["dead_after_s"] = opt.dead_after_s;
    json verdicts = json::array();
    for (const auto& ref : refs)
        verdicts.push_back(report::verdict_json_with_headline(*ref.job, *ref.comm, *ref.verdict));
    j["verdicts"] = std::move(verdicts);
    json ranks = json::array();
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        const auto& h = job.snaps[i].header;
        ranks.push_back(json{{"global_rank", h.global_rank},
                             {"host", h.host},
                             {"pid", h.pid},
                             {"connected", r.conn_id != 0},
                             {"exited_clean", r.bye},
                             {"seconds_since_last_frame", double(now - r.last_frame_ns) / 1e9},
                             {"clock_offset_ns", r.clock.offset()},
                             {"clock_offset_exact", r.clock.exact},
                             {"clock_offset_spread_ns", r.clock.spread()}});
        if (h.py_stacks_status)  // protocol 1.4: its Python stacks, as its latest digest with them carried
            ranks.back()["python"] = report::py_stacks_json(h.py_stacks_status, h.py_stacks_reason, h.py_stacks.get(),
                                                            h.py_stacks.get() ? "" : h.py_stacks_text);
    }
    j["ranks"] = std::move(ranks);
    json comms = json::array();
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms) {
            json rows = json::array();
            for (const auto& r : cr.view.ranks) {
                rows.push_back(json{{"comm_rank", r.comm_rank},
                                    {"global_rank", r.global_rank},
                                    {"host", r.host},
                                    {"pid", r.pid},
                                    {"alive", r.alive},
                                    {"issued", r.issued},
                                    {"reached", r.reached},
                                    {"completed", r.completed}});
                report::add_progress_basis(rows.back(), r);
            }
            comms.push_back(json{{"comm_id", report::hex(cr.comm_id)},
                                 {"name", cr.name},
                                 {"nranks", cr.view.nranks},
                                 {"missing", cr.missing},
                                 {"ranks", std::move(rows)}});
        }
    j["comms"] = std::move(comms);
    j["warnings"] = a.warnings.size() > 100
                        ? json(std::vector<std::string>(a.warnings.begin(), a.warnings.begin() + 100))
                        : json(a.warnings);

    if (wrote) {
        if (files::write_job_file(opt.out_dir, comp, "live-report.json", report::dump_json(j) + "\n", false, &why))
            log(
                fmt::format("job {}: report written to {}/live-report.txt and .json ({:.3f} s after the analysis "
                            "started)",
                            job_name, dir, double(mono_ns() - now) / 1e9));
        else
            write_failed(dir + "/live-report.json");
    }

    // A straggler is not a hang: no rank is asked for a dump for it alone.
    const bool only_stragglers = std::all_of(refs.begin(), refs.end(), [](const Analysis::VerdictRef& ref) {
        return ref.verdict->kind == verdict::Kind::Straggler;
    });
    if (!opt.request_dumps || only_stragglers || with_new_stacks) return;
    wire::DumpRequest dr;
    dr.request_id = ++request_id;
    dr.reason = first_line.substr(0, wire::kMaxString);
    std::vector<uint8_t> f;
    wire::encode(dr, f);
    for (auto& r : job.ranks) {
        if (!r.conn_id) continue;
        auto it = conns.find(r.conn_id);
        if (it != conns.end()) queue(*it->second, f);
        ++job.dump_requests;
    }
}

namespace {

// A keyed hash of an id, stable for this collector's life, that names nothing outside it.
uint64_t pseudonym(const std::string& key, const std::string& what) {
    const Digest32 d = hmac_sha256(key, reinterpret_cast<const uint8_t*>(what.data()), what.size());
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | d[size_t(i)];
    return v;
}

}  // namespace

std::string LiveServer::Impl::render_metrics(metrics::Format format) {
    const uint64_t now = mono_ns();
    const double now_unix_s = double(time_base::clock_ns(CLOCK_REALTIME)) / 1e9;
    // With a token, the ids a rank's Hello carries (job, communicator, pid) are not shown to whoever can scrape,
    // unless asked (--metrics-ids): an impostor would need no more than them.
    const bool hide_ids = !opt.token.empty() && !opt.metrics_ids;
    std::vector<metrics::RankCommSample> samples;
    std::vector<metrics::VerdictSample> verdicts;
    for (const auto& [id, job] : jobs) {
        const std::string job_label =
            hide_ids ? fmt::format("job-{:012x}", pseudonym(pseudonym_key, "job " + job->id) >> 16) : job->id;
        const auto comm_label = [&](uint64_t comm_id) {
            return hide_ids ? pseudonym(pseudonym_key, fmt::format("comm {} {}", job->id, comm_id)) : comm_id;
        };
        for (const auto& [comm_id, kind] : job->verdicts) verdicts.push_back({job_label, comm_label(comm_id), kind});
        for (size_t i = 0; i < job->ranks.size(); ++i) {
            const auto& s = job->snaps[i];
            const auto& r = job->ranks[i];
            for (const auto& ci : s.comms) {
                if (ci.comm_id == 0) continue;
                metrics::RankCommSample m;
                m.job = job_label;
                m.global_rank = s.header.global_rank;
                m.host = s.header.host;
                m.comm_id = comm_label(ci.comm_id);
                m.comm_rank = ci.rank;
                m.pci_bus_id = ci.pci_bus_id;
                m.gpu_uuid = ci.gpu_uuid;
                m.ops_issued = ci.ops_issued;
                m.ops_completed = ci.ops_completed;
                m.issued = ci.coll_issued;
                m.reached = ci.coll_reached;
                m.completed = ci.coll_completed;
                // On the collector's clock: as old as it is now, from the wall clock's now.
                if (ci.t_last_progress_ns)
                    m.last_progress_unix_s =
                        now_unix_s - (now > ci.t_last_progress_ns ? double(now - ci.t_last_progress_ns) / 1e9 : 0.0);
                auto nit = job->named.find(ci.comm_id);
                if (nit != job->named.end()) {
                    m.culprit = nit->second.first.count(ci.rank) > 0;
                    m.stalled = m.culprit || nit->second.second.count(ci.rank) > 0;
                }
                m.stalled = m.stalled || ci.stall_since_ns != 0;
                m.suspected = job->suspected.count(ci.comm_id) > 0;
                if (ci.completion_gap_p99_ns) m.gap_p99_s = double(ci.completion_gap_p99_ns) / 1e9;
                m.connected = r.conn_id != 0;
                m.alive = !r.bye && (r.conn_id != 0 || double(now - r.last_frame_ns) / 1e9 <= opt.dead_after_s);
                samples.push_back(std::move(m));
            }
        }
    }
    metrics::CollectorTotals t;
    t.connections = st_connections;
    t.ranks_known = ranks_known;
    t.jobs = jobs.size();
    t.frames = st_frames;
    t.bad_frames = st_bad;
    t.reports = st_reports;
    t.analyses = st_analyses;
    t.last_analysis_s = last_analysis_s;
    t.evicted_jobs = st_evicted;
    return metrics::render(samples, verdicts, t, {kVersion, kGitHash}, format, opt.metrics_max_bytes);
}

}  // namespace ncw::live

// The live collector (live_server_impl.h): the analysis, the reports and /metrics.
#include "live/live_server_impl.h"

namespace ncw::live {

// ---- analysis, reports and /metrics ----
//
// The analysis as digests change, the report of new verdicts (text and JSON, in the verdicts' one voice:
// report/headline.h, report/report_text.h), the dump requests, and /metrics.

namespace {

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
    if (job.end_news) return true;
    const uint64_t timeout = uint64_t(timeout_of(job) * 1e9), grace = uint64_t(opt.dead_after_s * 1e9);
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        if (!r.conn_id && !r.bye && now - r.alive_at(now) >= grace) return true;
        for (const auto& c : job.snaps[i]->comms) {
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

bool LiveServer::Impl::resume_wait(Job& job, uint64_t now) {
    if (!job.resume_wait_until_ns) return false;
    // The job's size: its ranks' WORLD_SIZE, else its largest communicator's.
    int expected = 0;
    size_t back = 0;
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        // Back once its first digest on the new connection is read: a Hello alone carries no communicator.
        if (job.ranks[i].conn_id && job.ranks[i].digest_since_hello) ++back;
        const FileSnapshot& s = *job.snaps[i];
        if (!s.ok) continue;
        expected = std::max(expected, s.header.world_size);
        if (s.header.world_size <= 0)
            for (const auto& c : s.comms) expected = std::max(expected, c.nranks);
    }
    const size_t missing = expected > 0 && size_t(expected) > back ? size_t(expected) - back : 0;
    if (expected > 0 && !missing) {
        job.resume_wait_until_ns = 0;
        if (job.resume_said)
            news(fmt::format("job {}: all {} ranks are back; judging the job now", clean(job.id), expected));
        return false;
    }
    if (now >= job.resume_wait_until_ns) {
        job.resume_wait_until_ns = 0;
        news(
            fmt::format("job {}: {} of its ranks did not come back within {:.0f} s of the collector's restart; judged "
                        "with the {} that did",
                        clean(job.id), expected > 0 ? std::to_string(missing) : std::string("some"),
                        double(kResumeGraceNs) / 1e9, back));
        return false;
    }
    if (!job.resume_said) {
        job.resume_said = true;
        news(fmt::format(
            "job {}: collector restarted (its ranks were reporting to a collector before), waiting for {} "
            "ranks to come back before naming anyone (at most {:.0f} s)",
            clean(job.id), expected > 0 ? std::to_string(missing) : std::string("its"), double(kResumeGraceNs) / 1e9));
    }
    return true;
}

void LiveServer::Impl::maybe_analyze(uint64_t now) {
    for (auto& [id, job] : jobs) {
        if (resume_wait(*job, now)) continue;
        // Never more than a third of the time in analysis, however large the job.
        const uint64_t cost = uint64_t(job->last_analysis_cost_s * 3e9);
        const uint64_t period = std::max(uint64_t(std::max(0.01, opt.analyze_period_s) * 1e9), cost);
        const uint64_t full_period = std::max(period, uint64_t(std::max(0.01, opt.idle_analysis_s) * 1e9));
        const uint64_t since = now - job->last_analysis_ns;
        // Something that just became due (a stall past the timeout, a death) is judged on this tick, whatever the
        // last analysis cost: the throttle is for analyses that find nothing new, and at 131,072 ranks (0.8 s each)
        // it would hold the verdict back by up to 2.4 s. Once per event: while it stays due, the throttle holds.
        // One pass over the ranks per tick at most: at 131,072 ranks it is not free.
        const bool first = !job->due_judged, news = first && something_due(*job, now);
        if (since < period && !news) continue;
        const bool due = first ? news : something_due(*job, now);
        if (!due) job->due_judged = false;
        const bool run = due || (job->dirty && since >= full_period) ||
                         (job->dirty && (job->stall_reported_ns || !job->suspected.empty())) ||
                         since >= 4 * full_period;
        if (!run) continue;
        // An analysis on the analysis thread holds it for as long as it costs: one that nothing made due is not
        // started when something becomes due within that time, so that the thread is free for it then.
        if (!due && job->last_analysis_cost_s >= opt.offload_analysis_s &&
            something_due(*job, now + uint64_t(job->last_analysis_cost_s * 1.5e9)))
            continue;
        // Behind reading the ranks' frames: what is read so far proves nothing about now (a rank that has moved on
        // would still look behind), so no analysis until it has caught up; skipping it also leaves the thread to
        // reading.
        if (const int64_t behind = read_lag(now); behind > kBehindNs) {
            if (due)
                log_limited("behind", fmt::format("job {}: the collector reads the ranks' frames {:.1f} s late (more "
                                                  "than one thread carries): no verdict until it catches up",
                                                  clean(job->id), double(behind) / 1e9));
            job->due_judged = false;
            continue;
        }
        if (!analyze_job(*job, now)) continue;
        job->due_judged = due;
    }
}

FileSnapshot& LiveServer::Impl::own_snapshot(Job& job, size_t i) {
    if (job.in_analysis && job.shared[i]) {
        job.snaps[i] = std::make_shared<FileSnapshot>(*job.snaps[i]);
        job.shared[i] = 0;
    }
    return *job.snaps[i];
}

bool LiveServer::Impl::analyze_job(Job& job, uint64_t now) {
    // A job whose analysis costs more than a tick goes to the analysis thread, one at a time; a small one is judged
    // here at once (a collector that only ever sees small jobs, as the one inside rank 0, never starts that thread).
    const bool offload = job.last_analysis_cost_s >= opt.offload_analysis_s;
    if (offload && (job.in_analysis || (worker && worker->busy()))) return false;
    job.dirty = false;
    job.last_analysis_ns = now;
    // Connected ranks are alive now; a disconnected one ages from its last frame and is gone after dead_after_s.
    for (size_t i = 0; i < job.ranks.size(); ++i)
        own_snapshot(job, i).header.heartbeat_mono_ns = job.ranks[i].alive_at(now);
    AnalysisOptions ao;
    ao.live = true;
    ao.now_mono_ns = now;
    ao.now_real_ns = time_base::clock_ns(CLOCK_REALTIME);
    // A death (protocol 1.6) is judged at timeout 0: what waits on the rank that died waits for good.
    const bool death = job.end_news;
    job.end_news = false;
    ao.timeout_s = death ? 0 : timeout_of(job);
    ao.stale_after_s = opt.dead_after_s;
    ao.audit = job.audited_gen != job.facts_gen;
    // Issue 45: absent ranks only as far as the job's reports justify them; and stop() interrupts (the analysis
    // thread has a flag of its own).
    ao.absent_floor = kAbsentFloor;
    ao.cancel = &cancel_analysis;
    if (offload) {
        if (!worker) worker = std::make_unique<AnalysisWorker>(wake_fd);
        auto task = std::make_unique<AnalysisTask>();
        task->job_id = job.id;
        task->job_serial = job.serial;
        task->facts_gen = job.facts_gen;
        task->snaps.assign(job.snaps.begin(), job.snaps.end());
        task->options = ao;
        task->now = now;
        task->death = death;
        std::fill(job.shared.begin(), job.shared.end(), uint8_t(1));
        job.in_analysis = true;
        if (worker->post(task)) return true;
        job.in_analysis = false;  // no thread: judged here
    }
    std::vector<const FileSnapshot*> files;
    files.reserve(job.snaps.size());
    for (const auto& f : job.snaps) files.push_back(f.get());
    const uint64_t t0 = mono_ns();
    Analysis a = analyze(files, ao);
    const double cost_s = double(mono_ns() - t0) / 1e9;
    if (a.cancelled) return true;  // stopping: nothing of it is reported
    keep_audit(job, a, job.facts_gen);
    judged(job, a, now, death, cost_s);
    return true;
}

// An analysis that audited (at facts_gen) leaves its findings for the next; one that did not takes them.
void LiveServer::Impl::keep_audit(Job& job, Analysis& a, uint64_t facts_gen) {
    for (auto& jr : a.jobs) {
        if (job.audited_gen == facts_gen) {
            jr.audit = job.audit;
        } else {
            job.audit = jr.audit;
            job.audited_gen = facts_gen;
        }
    }
}

void LiveServer::Impl::take_analysis() {
    if (!worker) return;
    std::unique_ptr<AnalysisTask> t = worker->take();
    if (!t) return;
    auto it = jobs.find(t->job_id);
    if (it == jobs.end() || it->second->serial != t->job_serial) return;  // evicted meanwhile
    Job& job = *it->second;
    job.in_analysis = false;
    std::vector<std::pair<size_t, wire::Digest>> deferred;
    deferred.swap(job.deferred);
    for (auto& [rank, m] : deferred)
        if (rank < job.ranks.size()) {
            job.ranks[rank].deferred = 0;
            apply_digest(job, rank, m);
            within_budget(job, rank);
        }
    if (t->result.cancelled) return;
    keep_audit(job, t->result, t->facts_gen);
    judged(job, t->result, t->now, t->death, t->cost_s);
}

void LiveServer::Impl::judged(Job& job, const Analysis& a, uint64_t now, bool death, double cost_s) {
    if (death) {
        const auto refs = a.all_verdicts();
        const bool dead = std::any_of(refs.begin(), refs.end(), [](const Analysis::VerdictRef& ref) {
            return ref.verdict->kind == verdict::Kind::Dead;
        });
        // Nothing waits on it (yet): the timeout judges the job as usual.
        if (!dead) {
            job.dirty = true;
            job.last_analysis_cost_s = cost_s;
            analyze_job(job, mono_ns());
            return;
        }
    }
    last_analysis_s = cost_s;
    job.last_analysis_cost_s = last_analysis_s;
    ++st_analyses;
    // Communicators whose absent ranks the job's reports do not justify (AnalysisOptions::absent_floor): said once,
    // when its ranks have stopped arriving.
    for (const auto& jr : a.jobs)
        if (jr.set_aside && !job.absent_said && now - job.last_new_rank_ns >= kSetAsideSayNs) {
            job.absent_said = true;
            log_limited("set aside", fmt::format("job {}: {} communicator(s) set aside, not analysed until more of "
                                                 "their ranks report: their absent ranks are more than the job's "
                                                 "reports justify (comm {} claims {} ranks, {} reported)",
                                                 clean(job.id), jr.set_aside, report::hex(jr.set_aside_comm),
                                                 jr.set_aside_nranks, jr.set_aside_seen));
        }

    job.named.clear();
    job.verdicts.clear();
    job.culprits.clear();
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms)
            if (const verdict::Verdict* v = report::culprit_verdict(cr))
                job.culprits[cr.comm_id] = {verdict::kind_name(v->kind), report::culprit_labels(jr, cr, *v)};
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
        // A collective's MISMATCH: its signatures are kept past the window (Job::pinned_sigs).
        if (v.kind == verdict::Kind::Mismatch && !v.consequence && disk::is_collective(disk::OpType(v.op.op))) {
            auto& pins = job.pinned_sigs[v.comm_id];
            pins.insert(v.seq);
            if (pins.size() > kMaxPinnedSigs) pins.erase(std::prev(pins.end()));
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
                news(fmt::format("job {}: {}", clean(job.id), report::verdict_lines(jr, cr, v).front()));
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
        news(fmt::format("job {}: recovered: no stall any more ({:.1f} s after the report)", clean(job.id),
                         double(now - job.stall_reported_ns) / 1e9));
        job.stall_reported_ns = 0;
        // A later stall at the same place is news again; mismatches and stragglers stay reported once.
        for (auto it = job.reported.begin(); it != job.reported.end();)
            it = it->rfind("MISMATCH|", 0) == 0 || it->rfind("STRAGGLER|", 0) == 0 ? std::next(it)
                                                                                   : job.reported.erase(it);
    }
}

report::LiveClocks LiveServer::Impl::clocks(const Job& job) const {
    report::LiveClocks c;
    c.window = OffsetFilter::kWindow;
    for (const auto& r : job.ranks) {
        if (r.clock.exact)
            ++c.exact;
        else if (r.clock.count) {
            ++c.estimated;
            c.widest_spread_ns = std::max(c.widest_spread_ns, r.clock.spread());
        }
    }
    return c;
}

void LiveServer::Impl::report(Job& job, const Analysis& a, uint64_t now, bool with_new_stacks) {
    const auto refs = a.all_verdicts();
    const std::string job_name = job.id.empty() ? "(no job id)" : clean(job.id);
    const uint64_t real = time_base::clock_ns(CLOCK_REALTIME);
    const report::LiveText live = report::live_report_text(a, job.id, real, with_new_stacks, clocks(job));
    const std::string& text = live.text;
    const std::string& first_line = live.first_line;

    // Text first: it is small (the table is capped) and what a person or a script watches for.
    const std::string comp = files::job_component(job.id, 128);
    const std::string dir = opt.out_dir.empty() ? "" : opt.out_dir + "/" + comp;
    // Nothing planted in the job folder (its name is the client's) is followed: read/safe_write.h.
    std::string why, risk;
    const bool wrote = !dir.empty() && files::write_job_file(opt.out_dir, comp, "live-report.txt", text, false, &why,
                                                             job.folder_risk_said ? nullptr : &risk);
    // A job folder someone else made first (its name is the job's, known ahead) can have its reports replaced.
    if (!risk.empty()) {
        job.folder_risk_said = true;
        log_limited("report folder", fmt::format("job {}: the report folder is not the collector's alone: {}. Whoever "
                                                 "can write there can replace or remove the live reports",
                                                 job_name, risk));
    }
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
        news(fmt::format("job {}: {}", job_name, first_line));
    }

    json j;
    j["schema"] = "ncclwatch.live/1";
    j["ncclwatch_version"] = kVersionLine;
    j["job_id"] = job.id;
    j["time"] = report::wall_time(real);
    j["timeout_s"] = timeout_of(job);
    j["dead_after_s"] = opt.dead_after_s;
    json verdicts = json::array();
    for (const auto& ref : refs)
        verdicts.push_back(report::verdict_json_with_headline(*ref.job, *ref.comm, *ref.verdict));
    j["verdicts"] = std::move(verdicts);
    json ranks = json::array();
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        const auto& h = job.snaps[i]->header;
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
                                 {"ranks", std::move(rows)}});
            report::put_rank_list(comms.back(), "missing", cr.missing);
        }
    j["comms"] = std::move(comms);
    j["audit"] = a.jobs.empty() ? json::array() : report::audit_json(a.jobs.front().audit);
    j["warnings"] = a.warnings.size() > 100
                        ? json(std::vector<std::string>(a.warnings.begin(), a.warnings.begin() + 100))
                        : json(a.warnings);

    if (wrote) {
        if (files::write_job_file(opt.out_dir, comp, "live-report.json", report::dump_json(j) + "\n", false, &why))
            news(
                fmt::format("job {}: report written to {}/live-report.txt and .json ({:.3f} s after the analysis "
                            "started)",
                            job_name, dir, double(mono_ns() - now) / 1e9));
        else
            write_failed(dir + "/live-report.json");
    }
    // Counted once its files are in place: whoever waits for the count then reads this report, not the one before.
    ++st_reports;

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
    std::vector<metrics::CulpritSample> culprits;
    for (const auto& [id, job] : jobs) {
        const std::string job_label =
            hide_ids ? fmt::format("job-{:012x}", pseudonym(pseudonym_key, "job " + job->id) >> 16) : job->id;
        const auto comm_label = [&](uint64_t comm_id) {
            return hide_ids ? pseudonym(pseudonym_key, fmt::format("comm {} {}", job->id, comm_id)) : comm_id;
        };
        for (const auto& [comm_id, kind] : job->verdicts) verdicts.push_back({job_label, comm_label(comm_id), kind});
        for (const auto& [comm_id, c] : job->culprits)
            culprits.push_back({job_label, comm_label(comm_id), c.first, c.second.ranks, c.second.hosts, c.second.op});
        for (size_t i = 0; i < job->ranks.size(); ++i) {
            const auto& s = *job->snaps[i];
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
                m.alive = !r.bye && double(now - r.alive_at(now)) / 1e9 <= opt.dead_after_s;
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
    return metrics::render(samples, verdicts, culprits, t, {kVersion, kGitHash}, format, opt.metrics_max_bytes);
}

}  // namespace ncw::live

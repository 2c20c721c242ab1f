// The text report of an analysis (see report_text.h).
#include "report/report_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_set>

#include "engine/env_audit.h"
#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"
#include "report/headline.h"
#include "report/report_json.h"

namespace ncw::report {

namespace {

using verdict::RankCommState;

// ANSI colours, or nothing.
struct Paint {
    bool on = false;
    std::string operator()(const char* code, const std::string& s) const {
        return on ? fmt::format("\x1b[{}m{}\x1b[0m", code, s) : s;
    }
};
constexpr const char* kRed = "1;31";
constexpr const char* kGreen = "1;32";
constexpr const char* kYellow = "33";
constexpr const char* kBold = "1";

using Row = std::vector<std::string>;

void print_table(std::string& out, const std::vector<Row>& rows, const std::vector<bool>& hot, const Paint& paint) {
    std::vector<size_t> w(rows.front().size(), 0);
    for (const auto& row : rows)
        for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
    for (size_t k = 0; k < rows.size(); ++k) {
        std::string s = "   ";
        for (size_t i = 0; i < rows[k].size(); ++i)
            s += i + 1 < rows[k].size() ? fmt::format(" {:<{}} ", rows[k][i], w[i]) : " " + rows[k][i];
        out += (k == 0 ? paint(kBold, s) : hot[k] ? paint(kRed, s) : s) + "\n";
    }
}

void comm_table(std::string& out, const CommResult& c, const TextOptions& opt, const Paint& paint) {
    std::set<int> culprits;
    for (const auto& v : c.verdicts) culprits.insert(v.culprits.begin(), v.culprits.end());
    std::vector<Row> rows = {{"rank", "global", "host", "pid", "GPU", "issued", "reached", "completed", "state"}};
    std::vector<bool> hot = {false};
    auto row_of = [](const RankCommState& r) {
        return Row{std::to_string(r.comm_rank),
                   std::to_string(r.global_rank),
                   clean(r.host),
                   std::to_string(r.pid),
                   r.cuda_dev >= 0 ? std::to_string(r.cuda_dev) : "-",
                   std::to_string(r.issued),
                   r.gpu_tracking ? std::to_string(r.reached) : "-",
                   std::to_string(r.completed),
                   rank_state_words(r)};
    };
    const bool grouped = !opt.all_ranks && c.view.ranks.size() > opt.max_rows;
    if (!grouped) {
        for (const auto& r : c.view.ranks) {
            rows.push_back(row_of(r));
            hot.push_back(culprits.count(r.comm_rank) > 0);
        }
    } else {
        // Identical progress and state share a row; culprits keep theirs.
        struct Group {
            std::vector<int> ranks, global;
            std::set<std::string> hosts;
            std::set<int64_t> pids;
            std::set<int> gpus;
            Row row;
        };
        std::vector<Group> groups;
        std::map<std::string, size_t> index;
        for (const auto& r : c.view.ranks) {
            if (culprits.count(r.comm_rank)) {
                rows.push_back(row_of(r));
                hot.push_back(true);
                continue;
            }
            Row row = row_of(r);
            const std::string key = row[5] + "|" + row[6] + "|" + row[7] + "|" + row[8];
            auto [it, fresh] = index.emplace(key, groups.size());
            if (fresh) groups.push_back(Group{{}, {}, {}, {}, {}, row});
            Group& g = groups[it->second];
            g.ranks.push_back(r.comm_rank);
            g.global.push_back(r.global_rank);
            g.hosts.insert(clean(r.host));
            g.pids.insert(r.pid);
            g.gpus.insert(r.cuda_dev);
        }
        for (auto& g : groups) {
            if (g.ranks.size() > 1) {
                g.row[0] = format_ranks(g.ranks);
                g.row[1] = format_ranks(g.global);
                g.row[2] = g.hosts.size() == 1 ? *g.hosts.begin() : plural(g.hosts.size(), "host", "hosts");
                g.row[3] = plural(g.pids.size(), "pid", "pids");
                g.row[4] = g.gpus.size() == 1 ? g.row[4] : plural(g.gpus.size(), "GPU", "GPUs");
            }
            rows.push_back(g.row);
            hot.push_back(false);
        }
    }
    print_table(out, rows, hot, paint);
    if (grouped) out += "    (rows with the same progress and state grouped; --all-ranks prints one row per rank)\n";
    if (!c.missing.empty())
        out += fmt::format("    not visible (no rank file): comm rank{} {} of {}\n", c.missing.size() == 1 ? "" : "s",
                           format_ranks(c.missing), c.view.nranks);
}

// The evidence of a verdict; for big communicators only the culprits' lines, the general ones and a few others (one
// line per rank of 512 ranks buries the culprit) unless all_ranks.
std::vector<std::string> evidence_lines(const CommResult& c, const verdict::Verdict& v, const TextOptions& opt) {
    const size_t keep_others = 8;
    std::vector<std::string> out;
    if (opt.all_ranks || v.evidence.size() <= opt.max_rows) {
        for (const auto& e : v.evidence) out.push_back(clean(e));
        return out;
    }
    std::vector<std::string> culprit_prefix;
    for (int r : v.culprits) culprit_prefix.push_back(fmt::format("rank {} ", r));
    size_t others = 0, left_out = 0;
    for (const auto& e : v.evidence) {
        const bool per_rank = e.rfind("rank ", 0) == 0 && e.size() > 5 && isdigit((unsigned char)e[5]);
        bool culprit = false;
        for (const auto& p : culprit_prefix) culprit = culprit || e.rfind(p, 0) == 0;
        if (!per_rank || culprit || others++ < keep_others)
            out.push_back(clean(e));
        else
            ++left_out;
    }
    if (left_out)
        out.push_back(fmt::format("... {} more line{} about other ranks of {} (--all-ranks prints them)", left_out,
                                  left_out == 1 ? "" : "s", hex(c.comm_id)));
    return out;
}

// A finding of the environment audit: its line, then its evidence indented; the same in `analyze` and live.
std::vector<std::string> audit_lines(const audit::Finding& f) {
    std::vector<std::string> lines{
        fmt::format("environment ({}): {}", audit::severity_name(f.severity), clean(f.summary))};
    for (const auto& e : f.evidence) lines.push_back("    " + clean(e));
    return lines;
}

}  // namespace

std::string rank_state_words(const RankCommState& r) {
    std::string s;
    const auto state = disk::CommState(r.comm_state);
    if (r.exited_clean)
        s = "exited";
    else if (!r.alive)
        s = r.heartbeat_age_s > 0 ? fmt::format("GONE (heartbeat {:.1f} s old)", r.heartbeat_age_s) : "GONE";
    else if (state != disk::CommState::Active)
        s = state == disk::CommState::InitFailed ? "init failed" : disk::comm_state_name(r.comm_state);
    else if (verdict::gpu_behind(r))
        s = fmt::format("GPU busy before #{}", r.completed + 1);
    else if (r.issued > r.completed)
        s = fmt::format("waiting in #{}", r.completed + 1);
    else
        s = "idle";
    if (verdict::is_async_error(r.async_error))
        s += fmt::format(", async error {} ({})", nccl_result_name(r.async_error), r.async_error);
    if (!r.gpu_tracking) s += ", no GPU tracking";
    return s;
}

std::string python_section(const CommResult& c, const verdict::Verdict& v, const TextOptions& opt) {
    // The culprits, the waiting, then the others, each once (a set: a scan each is O(ranks^2) at 131,072 ranks).
    std::vector<int> order = v.culprits;
    std::unordered_set<int> listed(order.begin(), order.end());
    for (int r : v.waiting)
        if (listed.insert(r).second) order.push_back(r);
    for (const auto& r : c.view.ranks)
        if (listed.insert(r.comm_rank).second) order.push_back(r.comm_rank);
    std::string out;
    size_t shown = 0, left_out = 0;
    constexpr size_t kFrames = 12;
    for (int cr : order) {
        const RankCommState* r = find_rank(c, cr);
        if (!r) continue;
        const bool unavailable = r->py_stacks_status == uint32_t(disk::PyStacksStatus::Unavailable) ||
                                 r->py_stacks_status == uint32_t(disk::PyStacksStatus::Failed);
        const StacksChoice pick = stacks_for(*r, &v);
        if (!pick.stacks && !unavailable) continue;
        if (!opt.all_ranks && shown >= opt.max_rows) {
            ++left_out;
            continue;
        }
        ++shown;
        const std::string who =
            r->global_rank >= 0 ? fmt::format("rank {}", r->global_rank) : fmt::format("comm rank {}", cr);
        if (!pick.stacks) {
            out += fmt::format("  {}: {}\n", who,
                               clean(r->py_stacks_note.empty() ? disk::py_stacks_status_name(r->py_stacks_status)
                                                               : r->py_stacks_note));
            continue;
        }
        const py::Thread* t = py::nccl_thread(*pick.stacks, newest_tid(*r));
        const auto w = where_in(*r, pick);
        // A capture of another moment is shown for what it is, never as where the rank was during this verdict.
        out += fmt::format("  {} (captured at {}{}, {}): {}\n", who, disk::py_stacks_reason_name(pick.reason),
                           pick.held ? ", kept from the first stall" : "",
                           plural(pick.stacks->threads.size(), "thread", "threads"),
                           !pick.during ? std::string("taken at another moment; where it was during this stall is "
                                                      "not known")
                           : w          ? clean(py::where_words(*w))
                                        : std::string("no Python frame"));
        if (!t) continue;
        for (size_t i = 0; i < t->frames.size() && i < kFrames; ++i) {
            const py::Frame& f = t->frames[i];
            out += fmt::format("    {} File \"{}\", line {} in {}\n", py::is_library_file(f.file) ? " " : ">",
                               clean(f.file), f.line, clean(f.func));
        }
        if (t->frames.size() > kFrames) out += fmt::format("      ... {} more frames\n", t->frames.size() - kFrames);
    }
    if (left_out) out += fmt::format("  ... {} more ranks with stacks (--all-ranks prints them)\n", left_out);
    return out;
}

std::string render_text(const Analysis& a, const TextOptions& opt) {
    const Paint paint{opt.color};
    std::string out;
    const auto all = a.all_verdicts();
    const bool bad = hang_or_mismatch(a);
    const bool story = opt.story && !opt.story->empty();
    // Nothing stands at the end, but something happened before it: that is the answer (the exit status stays 0).
    const std::string first = all.empty() && story ? story_headline(*opt.story) : headline(a);
    out += paint(all.empty() && !story ? kGreen
                 : bad                 ? kRed
                                       : kYellow,
                 (all.empty() ? "OK       " : "VERDICT  ") + clean(first)) +
           "\n";

    size_t ncomms = 0;
    for (const auto& j : a.jobs) ncomms += j.comms.size();
    // "the ranks' stall timeout 60 s (NCCLWATCH_TIMEOUT_SEC), analyzed with --timeout 0 s"
    const std::string ranks =
        opt.ranks_timeout.empty() ? std::string() : "the ranks' stall timeout " + opt.ranks_timeout + ", ";
    out += fmt::format("         ({} of {} read, {}, {}; {}analyzed with --timeout {:g} s)\n",
                       plural(a.files_read, "rank file", "rank files"), a.files.size(),
                       plural(a.jobs.size(), "job", "jobs"), plural(ncomms, "communicator", "communicators"), ranks,
                       opt.timeout_s);
    const bool many_jobs = a.jobs.size() > 1;
    auto job_name_of = [](const std::string& id) { return id.empty() ? std::string("(no job id)") : clean(id); };
    auto job_name = [&](const JobResult& j) { return job_name_of(j.job_id); };

    const auto lead = lead_verdict(a);
    if (lead.verdict) {
        const auto& v = *lead.verdict;
        out += "\n" + paint(kBold, "Evidence") + "\n";
        out += fmt::format("  {}  {}\n", verdict::kind_name(v.kind), clean(v.summary));
        for (const auto& e : evidence_lines(*lead.comm, v, opt)) out += "    " + e + "\n";
        const std::string py = python_section(*lead.comm, v, opt);
        if (!py.empty())
            out +=
                "\n" + paint(kBold, "Python stacks") + " (the thread that issued NCCL calls; > the user's code)\n" + py;
    }

    if (story) {
        out += "\n" + paint(kBold, "Before the end") + " (over by the end: from the ranks' reports and init times)\n";
        for (const StoryEntry& s : *opt.story)
            out += fmt::format("  {}{}{}\n", s.time.empty() ? "" : clean(s.time) + "  ",
                               many_jobs ? "job " + job_name_of(s.job_id) + ": " : "", clean(s.line));
    }

    out += "\n" + paint(kBold, "Communicators") + "\n";
    for (const auto& j : a.jobs) {
        if (&j != &a.jobs.front()) out += "\n";
        out += fmt::format("  job {}: {}, as of {}\n", job_name(j), plural(j.files.size(), "file", "files"),
                           wall_time(j.now_real_ns));
        for (const auto& c : j.comms) {
            std::string head = "  " + comm_words(j, c);
            if (!c.verdicts.empty()) {
                std::string kinds;
                for (const auto& v : c.verdicts)
                    kinds += (kinds.empty() ? "" : ",") + std::string(verdict::kind_name(v.kind));
                head += "  [" + kinds + "]";
            }
            if (!c.suspected.empty()) head += fmt::format("  [SUSPECTED {}]", verdict::kind_name(c.suspected[0].kind));
            // The baseline, once the ranks' shims have one (format 1.4).
            if (c.suspect_after_s > 0)
                head += fmt::format("  (suspected after {:.1f} s without completion)", c.suspect_after_s);
            out += "\n" + head + "\n";
            comm_table(out, c, opt, paint);
        }
        if (j.comms.empty()) out += "    no communicator with a known id and rank\n";
    }

    // Everything else: other verdicts, audit findings, missing ranks, unreadable files, other warnings.
    std::vector<std::string> noticed;
    for (const auto& ref : all) {
        if (ref.verdict == lead.verdict) continue;
        noticed.push_back(fmt::format("{}{}: {}", many_jobs ? "job " + job_name(*ref.job) + ": " : "",
                                      verdict::kind_name(ref.verdict->kind),
                                      clean(verdict_headline(*ref.job, *ref.comm, *ref.verdict))));
        for (const auto& e : evidence_lines(*ref.comm, *ref.verdict, opt)) noticed.push_back("    " + e);
    }
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.suspected) {
                noticed.push_back(
                    fmt::format("{}{}", many_jobs ? "job " + job_name(j) + ": " : "", verdict_lines(j, c, v).front()));
                for (const auto& e : evidence_lines(c, v, opt)) noticed.push_back("    " + e);
            }
    for (const auto& j : a.jobs)
        for (const auto& f : j.audit) {
            const auto lines = audit_lines(f);
            noticed.push_back((many_jobs ? "job " + job_name(j) + ": " : "") + lines.front());
            noticed.insert(noticed.end(), lines.begin() + 1, lines.end());
        }
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms)
            if (!c.missing.empty())
                noticed.push_back(fmt::format("{}missing ranks: comm rank{} {} of {} {} no rank file here",
                                              many_jobs ? "job " + job_name(j) + ": " : "",
                                              c.missing.size() == 1 ? "" : "s", format_ranks(c.missing),
                                              comm_words(j, c), c.missing.size() == 1 ? "has" : "have"));
    std::set<std::string> said;
    for (const auto& f : a.files)
        if (!f.ok) {
            noticed.push_back(fmt::format("unreadable file: {}: {}", clean(f.path), clean(f.error)));
            said.insert(f.path + ": " + f.error);
        }
    for (const auto& w : a.warnings) {
        // Missing ranks and unreadable files are listed above in their own words.
        if (said.count(w) || w.find("not visible (no rank file here") != std::string::npos) continue;
        noticed.push_back(clean(w));
    }
    if (!noticed.empty()) {
        out += "\n" + paint(kYellow, "Also noticed") + "\n";
        for (const auto& n : noticed) out += (n.rfind("    ", 0) == 0 ? "  " : "  - ") + n + "\n";
    }
    return out;
}

LiveText live_report_text(const Analysis& a, const std::string& job_id, uint64_t real_ns, bool again,
                          const LiveClocks& clocks) {
    constexpr size_t kMaxTableRows = 256;  // per communicator (live-report.json has every rank)
    const std::string job_name = job_id.empty() ? "(no job id)" : clean(job_id);
    LiveText out;
    std::string& text = out.text;
    std::string& first_line = out.first_line;
    for (const auto& ref : a.all_verdicts()) {
        if (ref.verdict->kind == verdict::Kind::Straggler && !first_line.empty()) continue;
        const std::vector<std::string> lines = verdict_lines(*ref.job, *ref.comm, *ref.verdict);
        if (first_line.empty()) first_line = lines.front();
        text += lines.front() + "\n";
        for (size_t i = 1; i < lines.size(); ++i) text += "    " + lines[i] + "\n";
    }
    text = fmt::format("ncclwatch live report, job {}, {}{}\n", job_name, wall_time(real_ns),
                       again ? " (again: the ranks' Python stacks came)" : "") +
           text;
    if (const auto lead = lead_verdict(a); lead.verdict) {
        const std::string py = python_section(*lead.comm, *lead.verdict, TextOptions{});
        if (!py.empty()) text += "Python stacks (the thread that issued NCCL calls; > the user's code)\n" + py;
    }
    text += fmt::format(
        "clock offsets: {} rank(s) on this host's boot (exact), {} estimated by a one-way minimum filter over "
        "the last {} frames (each estimate is late by that rank's smallest one-way network delay; the "
        "widest window spread is {:.3f} ms)\n",
        clocks.exact, clocks.estimated, clocks.window, double(clocks.widest_spread_ns) / 1e6);
    for (const auto& jr : a.jobs)
        for (const auto& f : jr.audit)
            for (const auto& line : audit_lines(f)) text += line + "\n";
    for (const auto& jr : a.jobs) {
        const uint64_t job_now = a.jobs.front().now_mono_ns;
        for (const auto& cr : jr.comms) {
            text += fmt::format("\ncomm {}{} ({} ranks{})\n", hex(cr.comm_id),
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
                text += fmt::format("  {:>6} {:>6} {:<24} {:>8} {:>10} {:>10} {:>10} {:>10.1f}  {}\n", r.comm_rank,
                                    r.global_rank, clean(r.host).substr(0, 24), r.pid, r.issued, r.reached, r.completed,
                                    idle, rank_state_words(r));
            }
        }
    }
    return out;
}

}  // namespace ncw::report

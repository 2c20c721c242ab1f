// The text report and the JSON document of an analysis (see report_text.h).
#include "report/report_text.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "engine/env_audit.h"
#include "ncclwatch/format.h"
#include "report/report_json.h"

namespace ncw::report {

namespace {

using verdict::Kind;
using verdict::RankCommState;
using verdict::Role;

std::string plural(size_t n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

std::string time_of_day(uint64_t real_ns) {
    const time_t s = time_t(real_ns / 1000000000ull);
    tm t{};
    localtime_r(&s, &t);
    char buf[16];
    strftime(buf, sizeof buf, "%H:%M:%S", &t);
    return buf;
}

const RankCommState* find_rank(const CommResult& c, int comm_rank) {
    for (const auto& r : c.view.ranks)
        if (r.comm_rank == comm_rank) return &r;
    return nullptr;
}

// "rank 317 (host node39, GPU 5, pid 81234)": the global rank where known, the comm rank where it differs.
std::string where(const CommResult& c, int comm_rank) {
    const RankCommState* r = find_rank(c, comm_rank);
    if (!r) return fmt::format("comm rank {} (no rank file here)", comm_rank);
    std::string out =
        r->global_rank >= 0 ? fmt::format("rank {} (", r->global_rank) : fmt::format("comm rank {} (", comm_rank);
    if (r->global_rank >= 0 && r->global_rank != comm_rank) out += fmt::format("comm rank {}, ", comm_rank);
    out += "host " + (r->host.empty() ? std::string("?") : clean(r->host));
    if (r->cuda_dev >= 0) out += fmt::format(", GPU {}", r->cuda_dev);
    out += fmt::format(", pid {})", r->pid);
    return out;
}

// The culprits in words: each one with where it runs when there are few, a compressed list when there are many.
std::string who(const CommResult& c, const std::vector<int>& ranks) {
    if (ranks.empty()) return "no visible rank";
    if (ranks.size() <= 3) {
        std::string out;
        for (size_t i = 0; i < ranks.size(); ++i)
            out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + where(c, ranks[i]);
        return out;
    }
    std::vector<int> global;
    std::set<std::string> hosts;
    bool all_global = true;
    for (int r : ranks) {
        const RankCommState* s = find_rank(c, r);
        if (!s || s->global_rank < 0) all_global = false;
        if (s) global.push_back(s->global_rank), hosts.insert(s->host);
    }
    if (all_global)
        return fmt::format("ranks {} ({} on {})", format_ranks(global), plural(ranks.size(), "rank", "ranks"),
                           plural(hosts.size(), "host", "hosts"));
    return fmt::format("comm ranks {} ({})", format_ranks(ranks), plural(ranks.size(), "rank", "ranks"));
}

bool is_world(const JobResult& job, const CommResult& c) {
    if (c.parent_id) return false;
    for (const auto& o : job.comms)
        if (o.view.nranks > c.view.nranks) return false;
    return true;
}

// "communicator 0x... (world, 512 ranks)"
std::string comm_words(const JobResult& job, const CommResult& c) {
    std::string what;
    if (!c.name.empty()) what = "\"" + clean(c.name) + "\", ";
    if (c.parent_id)
        what += "split of " + hex(c.parent_id) + ", ";
    else if (is_world(job, c))
        what += "world, ";
    return fmt::format("communicator {} ({}{})", hex(c.comm_id), what, plural(size_t(c.view.nranks), "rank", "ranks"));
}

std::string op_words(const verdict::Verdict& v) {
    if (disk::OpType(v.op.op) == disk::OpType::None) return fmt::format("#{}", v.seq);
    return fmt::format("{} #{}", disk::op_name(v.op.op), v.seq);
}

// "since 02:14:07" from the job's "now" and the stall length; "" when the wall-clock time is unknown.
std::string since(const JobResult& job, const verdict::Verdict& v) {
    if (!job.now_real_ns || v.stalled_for_s <= 0) return "";
    const uint64_t back = uint64_t(v.stalled_for_s * 1e9);
    if (back > job.now_real_ns) return "";
    return " since " + time_of_day(job.now_real_ns - back);
}

uint64_t stalled_since_real(const JobResult& job, const verdict::Verdict& v) {
    if (!job.now_real_ns || v.stalled_for_s <= 0) return 0;
    const uint64_t back = uint64_t(v.stalled_for_s * 1e9);
    return back > job.now_real_ns ? 0 : job.now_real_ns - back;
}

std::string waiters(const verdict::Verdict& v) {
    return v.waiting.size() == 1 ? "1 rank waits" : fmt::format("{} ranks wait", v.waiting.size());
}

std::string hosts_of(const CommResult& c) {
    std::set<std::string> hosts;
    for (const auto& r : c.view.ranks) hosts.insert(clean(r.host));
    std::string out;
    size_t n = 0;
    for (const auto& h : hosts) {
        if (++n > 8) {
            out += fmt::format(" and {} more", hosts.size() - 8);
            break;
        }
        out += (out.empty() ? "" : ", ") + h;
    }
    return out;
}

bool culprit_gone(const CommResult& c, const verdict::Verdict& v) {
    for (int r : v.culprits)
        if (const auto* s = find_rank(c, r); s && s->exited_clean) return false;
    return true;
}

const char* role_name(Role r) {
    switch (r) {
        case Role::None: return "none";
        case Role::Initiating: return "initiating";
        case Role::Cascade: return "cascade";
    }
    return "none";
}

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

}  // namespace

std::string verdict_headline(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    const std::string comm = comm_words(job, c);
    const std::string culprits = who(c, v.culprits);
    const std::string op = op_words(v);
    std::string s;
    switch (v.kind) {
        case Kind::NotJoined:
            s = fmt::format("{} never issued {} on {}; {} in it{}", culprits, op, comm, waiters(v), since(job, v));
            break;
        case Kind::Dead:
            s = fmt::format("{} {}; {} in {} on {}{}", culprits,
                            culprit_gone(c, v) ? "is gone (process killed or crashed)" : "has exited", waiters(v), op,
                            comm, since(job, v));
            break;
        case Kind::Mismatch:
            s = fmt::format(
                "{} issued a different {} than the other ranks at #{} on {} (NCCL may complete it "
                "silently and corrupt data)",
                culprits, disk::OpType(v.op.op) == disk::OpType::None ? "op" : disk::op_name(v.op.op), v.seq, comm);
            break;
        case Kind::GpuNotReached:
            s = fmt::format("the GPU of {} has not reached {} on {} (busy with earlier work); {} in it{}", culprits, op,
                            comm, waiters(v), since(job, v));
            break;
        case Kind::StuckInNccl:
            s = fmt::format(
                "all {} ranks are inside {} on {} and none completed it{}: the transport is suspect "
                "(hosts {})",
                c.view.ranks.size(), op, comm, since(job, v), hosts_of(c));
            break;
        case Kind::AsyncError: s = fmt::format("NCCL reported an error on {} in {}", culprits, comm); break;
        case Kind::ExtraOp:
            s = fmt::format("{} issued {} on {} that no other rank issued: it is ahead, the others are not behind",
                            culprits, op, comm);
            break;
        case Kind::InitHang:
            s = fmt::format("init of {} did not finish: {} never entered or finished it", comm, culprits);
            break;
        case Kind::Straggler:
            s = fmt::format("{} is consistently last to arrive at collectives on {} (not a hang)", culprits, comm);
            break;
        case Kind::Unknown:
            s = fmt::format("{} in {} on {}{}; the culprit is not visible: {} no rank file here", waiters(v), op, comm,
                            since(job, v),
                            v.missing.empty()
                                ? std::string("some ranks have")
                                : fmt::format("comm rank{} {} {}", v.missing.size() == 1 ? "" : "s",
                                              format_ranks(v.missing), v.missing.size() == 1 ? "has" : "have"));
            break;
    }
    if (v.role == Role::Initiating) s += " (stalled first: other communicators wait because of it)";
    if (v.role == Role::Cascade)
        s += v.caused_by_comm ? fmt::format(" (cascade: waits because of communicator {})", hex(v.caused_by_comm))
                              : std::string(" (cascade of another communicator's stall)");
    return s;
}

bool hang_or_mismatch(const Analysis& a) {
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts)
                if (v.kind != Kind::Straggler) return true;
    return false;
}

Analysis::VerdictRef lead_verdict(const Analysis& a) {
    const auto all = a.all_verdicts();
    if (all.empty()) return {nullptr, nullptr, nullptr};
    for (const auto& ref : all)
        if (ref.verdict->role != Role::Cascade) return ref;
    return all.front();
}

std::string headline(const Analysis& a) {
    const auto all = a.all_verdicts();
    if (all.empty()) {
        size_t ncomms = 0;
        for (const auto& j : a.jobs) ncomms += j.comms.size();
        return fmt::format("no hang and no mismatch found: {} in {}, nothing stalled",
                           plural(a.files_read, "rank file", "rank files"),
                           plural(ncomms, "communicator", "communicators"));
    }
    const auto top = lead_verdict(a);
    std::string s = verdict_headline(*top.job, *top.comm, *top.verdict);
    if (a.jobs.size() > 1)
        s = fmt::format("job {}: {}", top.job->job_id.empty() ? "(no job id)" : clean(top.job->job_id), s);
    return s;
}

namespace {

std::string rank_state(const RankCommState& r) {
    std::string s = disk::comm_state_name(r.comm_state);
    if (r.exited_clean)
        s += ", exited cleanly";
    else if (!r.alive)
        s += fmt::format(", GONE (heartbeat {:.1f} s old)", r.heartbeat_age_s);
    if (r.issued > r.completed) s += fmt::format(", inside #{}", r.completed + 1);
    if (r.stall_since_ns) s += ", stalled";
    if (r.async_error) s += fmt::format(", async error {} ({})", nccl_result_name(r.async_error), r.async_error);
    if (!r.gpu_tracking) s += ", no GPU tracking";
    return s;
}

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
                   rank_state(r)};
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

}  // namespace

std::string render_text(const Analysis& a, const TextOptions& opt) {
    const Paint paint{opt.color};
    std::string out;
    const auto all = a.all_verdicts();
    const bool bad = hang_or_mismatch(a);
    out += paint(all.empty() ? kGreen
                 : bad       ? kRed
                             : kYellow,
                 (all.empty() ? "OK       " : "VERDICT  ") + clean(headline(a))) +
           "\n";

    size_t ncomms = 0;
    for (const auto& j : a.jobs) ncomms += j.comms.size();
    out += fmt::format("         ({} of {} read, {}, {}; stall timeout {} s)\n",
                       plural(a.files_read, "rank file", "rank files"), a.files.size(),
                       plural(a.jobs.size(), "job", "jobs"), plural(ncomms, "communicator", "communicators"),
                       opt.timeout_s);
    const bool many_jobs = a.jobs.size() > 1;
    auto job_name = [](const JobResult& j) { return j.job_id.empty() ? std::string("(no job id)") : clean(j.job_id); };

    const auto lead = lead_verdict(a);
    if (lead.verdict) {
        const auto& v = *lead.verdict;
        out += "\n" + paint(kBold, "Evidence") + "\n";
        out += fmt::format("  {}  {}\n", verdict::kind_name(v.kind), clean(v.summary));
        for (const auto& e : evidence_lines(*lead.comm, v, opt)) out += "    " + e + "\n";
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
        for (const auto& f : j.audit) {
            noticed.push_back(fmt::format("{}environment ({}): {}", many_jobs ? "job " + job_name(j) + ": " : "",
                                          audit::severity_name(f.severity), clean(f.summary)));
            for (const auto& e : f.evidence) noticed.push_back("    " + clean(e));
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

json analysis_json(const Analysis& a, double timeout_s) {
    json files = json::array();
    for (const auto& f : a.files)
        files.push_back(json{{"path", f.path},
                             {"ok", f.ok},
                             {"error", f.ok ? json(nullptr) : json(f.error)},
                             {"job_id", f.ok ? json(f.job_id) : json(nullptr)},
                             {"host", f.ok ? json(f.host) : json(nullptr)},
                             {"pid", f.ok ? json(f.pid) : json(nullptr)},
                             {"global_rank", f.ok ? json(f.global_rank) : json(nullptr)}});

    json jobs = json::array();
    json comms = json::array();
    for (const auto& j : a.jobs) {
        json missing = json::array();
        for (const auto& c : j.comms)
            if (!c.missing.empty())
                missing.push_back(json{{"comm_id", hex(c.comm_id)},
                                       {"nranks", c.view.nranks},
                                       {"comm_ranks", c.missing},
                                       {"text", format_ranks(c.missing)}});
        json findings = json::array();
        for (const auto& f : j.audit)
            findings.push_back(json{{"severity", audit::severity_name(f.severity)},
                                    {"topic", f.topic},
                                    {"summary", f.summary},
                                    {"evidence", f.evidence},
                                    {"global_ranks", f.ranks}});
        json verdict_kinds = json::array();
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts) verdict_kinds.push_back(verdict::kind_name(v.kind));
        jobs.push_back(json{{"job_id", j.job_id},
                            {"files", j.files},
                            {"now_mono_ns", j.now_mono_ns},
                            {"now_real_ns", j.now_real_ns},
                            {"now_wall", j.now_real_ns ? json(wall_time(j.now_real_ns)) : json(nullptr)},
                            {"verdict_kinds", verdict_kinds},
                            {"missing", missing},
                            {"audit", findings}});

        for (const auto& c : j.comms) {
            json ranks = json::array();
            for (const auto& r : c.view.ranks)
                ranks.push_back(json{{"comm_rank", r.comm_rank},
                                     {"global_rank", r.global_rank},
                                     {"host", r.host},
                                     {"pid", r.pid},
                                     {"gpu", r.cuda_dev},
                                     {"pci_bus_id", r.pci_bus_id},
                                     {"file", r.file},
                                     {"alive", r.alive},
                                     {"exited_clean", r.exited_clean},
                                     {"heartbeat_age_s", r.heartbeat_age_s},
                                     {"issued", r.issued},
                                     {"reached", r.reached},
                                     {"completed", r.completed},
                                     {"gpu_tracking", r.gpu_tracking},
                                     {"comm_state", disk::comm_state_name(r.comm_state)},
                                     {"async_error", r.async_error},
                                     {"stall_since_ns", r.stall_since_ns},
                                     {"t_last_issue_ns", r.t_last_issue_ns},
                                     {"t_last_progress_ns", r.t_last_progress_ns}});
            json kinds = json::array();
            for (const auto& v : c.verdicts) kinds.push_back(verdict::kind_name(v.kind));
            comms.push_back(json{{"job_id", c.job_id},
                                 {"comm_id", hex(c.comm_id)},
                                 {"parent_id", c.parent_id ? json(hex(c.parent_id)) : json(nullptr)},
                                 {"name", c.name},
                                 {"world", is_world(j, c)},
                                 {"nranks", c.view.nranks},
                                 {"missing", c.missing},
                                 {"verdict_kinds", kinds},
                                 {"ranks", ranks}});
        }
    }

    json verdicts = json::array();
    for (const auto& ref : a.all_verdicts()) {
        const auto& v = *ref.verdict;
        json culprits = json::array();
        for (int r : v.culprits) {
            const RankCommState* s = find_rank(*ref.comm, r);
            culprits.push_back(json{{"comm_rank", r},
                                    {"visible", s != nullptr},
                                    {"global_rank", s ? json(s->global_rank) : json(nullptr)},
                                    {"host", s ? json(s->host) : json(nullptr)},
                                    {"pid", s ? json(s->pid) : json(nullptr)},
                                    {"gpu", s ? json(s->cuda_dev) : json(nullptr)},
                                    {"pci_bus_id", s ? json(s->pci_bus_id) : json(nullptr)},
                                    {"alive", s ? json(s->alive) : json(nullptr)},
                                    {"file", s ? json(s->file) : json(nullptr)}});
        }
        const uint64_t since_ns = stalled_since_real(*ref.job, v);
        verdicts.push_back(json{{"job_id", ref.job->job_id},
                                {"kind", verdict::kind_name(v.kind)},
                                {"role", role_name(v.role)},
                                {"caused_by_comm", v.caused_by_comm ? json(hex(v.caused_by_comm)) : json(nullptr)},
                                {"comm_id", hex(v.comm_id)},
                                {"seq", v.seq},
                                {"op", op_json(v.op)},
                                {"culprits", culprits},
                                {"waiting", v.waiting},
                                {"waiting_count", v.waiting.size()},
                                {"missing", v.missing},
                                {"stalled_for_s", v.stalled_for_s},
                                {"stalled_since_real_ns", since_ns ? json(since_ns) : json(nullptr)},
                                {"headline", verdict_headline(*ref.job, *ref.comm, v)},
                                {"summary", v.summary},
                                {"evidence", v.evidence}});
    }

    return json{{"schema", kAnalysisSchema},
                {"version", kAnalysisSchemaVersion},
                {"timeout_s", timeout_s},
                {"problem_found", hang_or_mismatch(a)},
                {"headline", headline(a)},
                {"files_read", a.files_read},
                {"files", files},
                {"warnings", a.warnings},
                {"jobs", jobs},
                {"verdicts", verdicts},
                {"comms", comms}};
}

}  // namespace ncw::report

// `ncclwatch-collector analyze`: rank files from any number of folders to verdicts and a report.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "job_view.h"
#include "ncclwatch/config_table.h"
#include "ncclwatch/format.h"
#include "rank_file.h"
#include "report_json.h"

namespace ncw::cli {

namespace {
using json = nlohmann::json;
using report::comm_json;
using report::dump_json;
using report::flags_str;
using report::header_json;
using report::hex;
using report::hexs;
using report::nccl_result_name;
using report::nccl_version_str;
using report::process_state_name;
using report::record_json;
using report::verdict_json;
using report::wall_time;
}  // namespace

namespace {

std::string rank_state(const verdict::RankCommState& r) {
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

json analysis_json(const Analysis& a, double timeout_s) {
    json verdicts = json::array();
    for (const auto& ref : a.all_verdicts()) verdicts.push_back(verdict_json(*ref.verdict, ref.job->job_id));
    json comms = json::array();
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms) {
            json ranks = json::array();
            for (const auto& r : c.view.ranks)
                ranks.push_back(json{{"comm_rank", r.comm_rank},
                                     {"global_rank", r.global_rank},
                                     {"host", r.host},
                                     {"pid", r.pid},
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
            comms.push_back(json{{"job_id", c.job_id},
                                 {"comm_id", hex(c.comm_id)},
                                 {"parent_id", c.parent_id ? json(hex(c.parent_id)) : json(nullptr)},
                                 {"name", c.name},
                                 {"nranks", c.view.nranks},
                                 {"missing", c.missing},
                                 {"ranks", ranks},
                                 {"verdicts", c.verdicts.size()}});
        }
    json jobs = json::array();
    for (const auto& j : a.jobs)
        jobs.push_back(json{
            {"job_id", j.job_id}, {"files", j.files}, {"now_mono_ns", j.now_mono_ns}, {"now_real_ns", j.now_real_ns}});
    json files = json::array();
    for (const auto& f : a.files) {
        json o{{"path", f.path}, {"ok", f.ok}};
        if (f.ok)
            o.update(json{{"job_id", f.job_id}, {"host", f.host}, {"pid", f.pid}, {"global_rank", f.global_rank}});
        else
            o["error"] = f.error;
        files.push_back(std::move(o));
    }
    return json{{"schema", "ncclwatch.analysis/1"}, {"timeout_s", timeout_s}, {"verdicts", verdicts}, {"comms", comms},
                {"warnings", a.warnings},           {"jobs", jobs},           {"files", files}};
}

void print_analysis(const Analysis& a, double timeout_s) {
    size_t ncomms = 0;
    for (const auto& j : a.jobs) ncomms += j.comms.size();
    fmt::print("ncclwatch analysis: {} rank file{} read of {}, {} job{}, {} communicator{}; stall timeout {} s\n",
               a.files_read, a.files_read == 1 ? "" : "s", a.files.size(), a.jobs.size(), a.jobs.size() == 1 ? "" : "s",
               ncomms, ncomms == 1 ? "" : "s", timeout_s);
    const bool many_jobs = a.jobs.size() > 1;

    fmt::print("\nVERDICTS\n");
    const auto all = a.all_verdicts();
    if (all.empty()) fmt::print("  none: no stalled collective and no mismatch\n");
    for (const auto& ref : all) {
        const auto& v = *ref.verdict;
        fmt::print("{:<16} {}{}\n", verdict::kind_name(v.kind),
                   many_jobs ? fmt::format("[job {}] ", clean(ref.job->job_id)) : "", clean(v.summary));
        for (const auto& e : v.evidence) fmt::print("    {}\n", clean(e));
    }

    for (const auto& j : a.jobs) {
        fmt::print("\nJOB {}  ({} file{}; as of {})\n", j.job_id.empty() ? "(no job id)" : clean(j.job_id),
                   j.files.size(), j.files.size() == 1 ? "" : "s", wall_time(j.now_real_ns));
        for (const auto& c : j.comms) {
            std::string head = fmt::format("comm {}  nranks {}", hex(c.comm_id), c.view.nranks);
            if (!c.name.empty()) head += fmt::format("  name \"{}\"", clean(c.name));
            if (c.parent_id) head += fmt::format("  parent {}", hex(c.parent_id));
            if (!c.verdicts.empty()) {
                std::string kinds;
                for (const auto& v : c.verdicts)
                    kinds += (kinds.empty() ? "" : ",") + std::string(verdict::kind_name(v.kind));
                head += "  [" + kinds + "]";
            }
            fmt::print("\n{}\n", head);

            const std::vector<std::string> hdr = {"rank",   "global",  "host",      "pid",
                                                  "issued", "reached", "completed", "state"};
            std::vector<std::vector<std::string>> rows;
            for (const auto& r : c.view.ranks)
                rows.push_back({std::to_string(r.comm_rank), std::to_string(r.global_rank), clean(r.host),
                                std::to_string(r.pid), std::to_string(r.issued),
                                r.gpu_tracking ? std::to_string(r.reached) : "-", std::to_string(r.completed),
                                rank_state(r)});
            std::vector<size_t> w(hdr.size());
            for (size_t i = 0; i < hdr.size(); ++i) w[i] = hdr[i].size();
            for (const auto& row : rows)
                for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
            auto line = [&](const std::vector<std::string>& row) {
                std::string s = " ";
                for (size_t i = 0; i < row.size(); ++i)
                    s += i + 1 < row.size() ? fmt::format(" {:<{}} ", row[i], w[i]) : " " + row[i];
                fmt::print("{}\n", s);
            };
            line(hdr);
            for (const auto& row : rows) line(row);
            if (!c.missing.empty())
                fmt::print("  not visible: rank{} {}\n", c.missing.size() == 1 ? "" : "s", format_ranks(c.missing));
        }
    }

    if (!a.warnings.empty()) {
        fmt::print("\nWARNINGS\n");
        for (const auto& w : a.warnings) fmt::print("  {}\n", clean(w));
    }
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
    bool as_json = false;
    double timeout_s = 0;
    std::vector<std::string> inputs;
    bool opts_done = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (!opts_done && a == "--") {
            opts_done = true;
        } else if (!opts_done && (a == "--help" || a == "-h")) {
            fmt::print("{}", kUsage);
            return 0;
        } else if (!opts_done && a == "--json") {
            as_json = true;
        } else if (!opts_done && (a == "--timeout" || a.rfind("--timeout=", 0) == 0)) {
            std::string v;
            if (a == "--timeout") {
                if (i + 1 >= args.size()) {
                    fmt::print(stderr, "{}: --timeout needs a value in seconds\n", kProg);
                    return 2;
                }
                v = args[++i];
            } else {
                v = a.substr(strlen("--timeout="));
            }
            char* end = nullptr;
            errno = 0;
            timeout_s = strtod(v.c_str(), &end);
            if (v.empty() || *end || errno || !std::isfinite(timeout_s) || timeout_s < 0) {
                fmt::print(stderr, "{}: --timeout: '{}' is not a number of seconds >= 0\n", kProg, v);
                return 2;
            }
        } else if (!opts_done && a.size() > 1 && a[0] == '-') {
            fmt::print(stderr, "{}: analyze: unknown option '{}'\n{}", kProg, a, kUsage);
            return 2;
        } else {
            inputs.push_back(a);
        }
    }
    if (inputs.empty()) {
        fmt::print(stderr, "{}: analyze: give at least one folder or rank file\n{}", kProg, kUsage);
        return 2;
    }

    std::vector<std::string> paths, problems;
    for (const auto& in : inputs) {
        struct stat st {};
        if (stat(in.c_str(), &st) != 0) {
            problems.push_back(in + ": " + strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            auto found = list_rank_files(in, true, &problems);
            if (found.empty()) problems.push_back(in + ": no rank files (*.ncw) in this folder");
            paths.insert(paths.end(), found.begin(), found.end());
        } else {
            paths.push_back(in);
        }
    }

    AnalysisOptions opt;
    opt.live = false;
    opt.timeout_s = timeout_s;
    Analysis a = analyze_paths(paths, opt);
    a.warnings.insert(a.warnings.begin(), problems.begin(), problems.end());

    if (as_json)
        fmt::print("{}\n", dump_json(analysis_json(a, timeout_s)));
    else if (a.files_read > 0)
        print_analysis(a, timeout_s);

    if (a.files_read == 0) {
        fmt::print(stderr, "{}: no readable rank file\n", kProg);
        if (!as_json)
            for (const auto& w : a.warnings) fmt::print(stderr, "  {}\n", clean(w));
        return 2;
    }
    return a.found_problem() ? 1 : 0;
}

}  // namespace ncw::cli

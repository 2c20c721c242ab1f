// ncclwatch-collector: reads rank files after the fact (or while the job hangs) and names the culprit.
//   env                      the NCCLWATCH_* variables
//   analyze [--json] [--timeout SEC] DIR_OR_FILE...
//   dump FILE [--json]       decode one rank file
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

#include "job_view.h"
#include "ncclwatch/config_table.h"
#include "ncclwatch/format.h"
#include "rank_file.h"
#include "report_json.h"

namespace {

using json = nlohmann::json;
using namespace ncw;
// The JSON shapes and formatters are shared with the shim's reports.
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

constexpr const char* kProg = "ncclwatch-collector";

const char* kUsage = R"(usage: ncclwatch-collector COMMAND [ARGS]

Commands:
  analyze [--json] [--timeout SEC] DIR_OR_FILE...
        Read every rank file (*.ncw; folders are searched recursively) and name what holds up each
        communicator: DEAD, NOT_JOINED, MISMATCH, ASYNC_ERROR, GPU_NOT_REACHED, STUCK_IN_NCCL.
        "Now" is the newest heartbeat of each job, so files copied later still read as of the hang.
        --timeout SEC  seconds without progress before an outstanding op counts as stalled (default 0)
        --json         one JSON object (schema ncclwatch.analysis/1) instead of the report
        Exit status: 0 nothing found, 1 a hang or mismatch found, 2 usage error or no readable file.
  dump [--json] FILE
        Decode one rank file: header, communicators and every valid record, in ticket order.
  env   List the NCCLWATCH_* environment variables the shim reads.
  help, --help, -h
        This text.
)";

// Text from a file goes to a terminal: no control characters.
std::string clean(const std::string& s) {
    std::string out = s;
    for (auto& c : out)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return out;
}

// Milliseconds since the file's start; "-" for "never".
std::string rel_ms(uint64_t t, uint64_t start) {
    if (!t) return "-";
    return fmt::format("{:.3f}", double(int64_t(t - start)) / 1e6);
}

// ---- env ----

std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower((unsigned char)c));
    return s;
}

int cmd_env() {
    struct Row {
        const char *name, *kind, *def, *accepted, *desc;
    };
    std::vector<Row> rows;
#define X(field, name, kind, def, accepted, desc) rows.push_back(Row{name, #kind, def, accepted, desc});
    NCW_CONFIG_TABLE(X)
#undef X
    size_t wn = 4, wk = 4, wd = 7;
    for (const auto& r : rows) {
        wn = std::max(wn, strlen(r.name));
        wk = std::max(wk, strlen(r.kind));
        wd = std::max(wd, strlen(r.def));
    }
    fmt::print("Environment variables read by the ncclwatch shim (set them for the training processes):\n\n");
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "NAME", wn, "KIND", wk, "DEFAULT", wd, "ACCEPTED");
    for (const auto& r : rows) {
        fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", r.name, wn, lower(r.kind), wk, r.def, wd, r.accepted);
        fmt::print("    {}\n", r.desc);
        if (const char* v = getenv(r.name)) fmt::print("    currently set: {}\n", clean(v));
    }
    return 0;
}

// ---- analyze ----

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

// ---- dump ----

int cmd_dump(const std::vector<std::string>& args) {
    bool as_json = false;
    std::string path;
    for (const auto& a : args) {
        if (a == "--json") {
            as_json = true;
        } else if (a == "--help" || a == "-h") {
            fmt::print("{}", kUsage);
            return 0;
        } else if (a.size() > 1 && a[0] == '-') {
            fmt::print(stderr, "{}: dump: unknown option '{}'\n{}", kProg, a, kUsage);
            return 2;
        } else if (path.empty()) {
            path = a;
        } else {
            fmt::print(stderr, "{}: dump takes one file\n", kProg);
            return 2;
        }
    }
    if (path.empty()) {
        fmt::print(stderr, "{}: dump: give a rank file\n{}", kProg, kUsage);
        return 2;
    }
    RankFile f;
    if (!f.open(path)) {
        fmt::print(stderr, "{}: {}: {}\n", kProg, path, f.error());
        return 2;
    }
    const HeaderInfo h = f.header();
    const auto comms = f.comms();
    const RecordSet rs = f.records();
    const uint64_t start = h.start_mono_ns;
    auto frames_of = [&](const Record& r) {
        return (r.flags & disk::kFlagHasBacktrace) ? f.backtrace(r.ticket) : std::vector<uint64_t>{};
    };

    if (as_json) {
        json cj = json::array();
        for (const auto& c : comms) cj.push_back(comm_json(c, start));
        json items = json::array();
        for (const auto& r : rs.records) items.push_back(record_json(r, start, frames_of(r)));
        json out{{"schema", "ncclwatch.dump/1"},
                 {"file", path},
                 {"warnings", f.warnings()},
                 {"header", header_json(h)},
                 {"comms", cj},
                 {"records", json{{"write_ticket", rs.write_ticket},
                                  {"first_ticket", rs.first_ticket},
                                  {"dropped", rs.dropped},
                                  {"torn", rs.torn},
                                  {"unknown_op", rs.unknown_op},
                                  {"cut", rs.cut},
                                  {"items", items}}}};
        fmt::print("{}\n", dump_json(out));
        return 0;
    }

    fmt::print("file       {}\n", path);
    for (const auto& w : f.warnings()) fmt::print("WARNING    {}\n", clean(w));
    fmt::print("format     {}.{}  header {} B, {} comm slots of {} B, ring {} x {} B, backtrace depth {}\n", h.major,
               h.minor, h.header_size, h.max_comms, h.comm_slot_size, h.ring_capacity, h.record_size, h.bt_depth);
    fmt::print("size       {} bytes (written as {})\n", h.actual_size, h.file_size);
    fmt::print("process    pid {}  global rank {}/{}  local rank {}/{}  host {}\n", h.pid, h.global_rank, h.world_size,
               h.local_rank, h.local_world_size, clean(h.host));
    fmt::print("job        {}\n", h.job_id.empty() ? "(none)" : clean(h.job_id));
    fmt::print("started    {}  (monotonic {:.3f} s, boot {})\n", wall_time(h.start_real_ns), double(start) / 1e9,
               hex(h.boot_id_hash));
    fmt::print("versions   NCCL {} ({}), CUDA driver {}\n", nccl_version_str(h.nccl_version), h.nccl_version,
               h.cuda_driver_version);
    fmt::print("state      {}, heartbeat at {} ms ({})\n", process_state_name(h.process_state),
               rel_ms(h.heartbeat_mono_ns, start),
               h.heartbeat_mono_ns ? wall_time(h.heartbeat_mono_ns - start + h.start_real_ns) : "never");
    fmt::print("counters   {} comms, {} tickets, dump requests {}, dumps {}, reports {}\n", h.num_comms, h.write_ticket,
               h.dump_request, h.dumps_written, h.reports_written);

    for (const auto& c : comms) {
        fmt::print("\ncomm slot {}: {}  rank {}/{}  {}  dev {}  pci {}{}{}\n", c.slot, hex(c.comm_id), c.rank, c.nranks,
                   disk::comm_state_name(c.state), c.cuda_dev, c.pci_bus_id.empty() ? "-" : clean(c.pci_bus_id),
                   c.name.empty() ? "" : fmt::format("  name \"{}\"", clean(c.name)),
                   c.parent_id
                       ? fmt::format("  parent {} (color {}, key {})", hex(c.parent_id), c.split_color, c.split_key)
                       : "");
        fmt::print(
            "  collectives issued/returned/reached/completed #{}/#{}/#{}/#{}  ops {}/{}  p2p sends {} recvs {}\n",
            c.coll_issued, c.coll_returned, c.coll_reached, c.coll_completed, c.ops_issued, c.ops_completed,
            c.p2p_sends, c.p2p_recvs);
        fmt::print("  init {}..{} ms  last issue {} ms  last progress {} ms  stall since {} ms  flags {}\n",
                   rel_ms(c.t_init_start_ns, start), rel_ms(c.t_init_done_ns, start), rel_ms(c.t_last_issue_ns, start),
                   rel_ms(c.t_last_progress_ns, start), rel_ms(c.stall_since_ns, start), c.stall_flags);
        fmt::print("  blocking {}  gpu tracking {}  untracked ops {}  async error {} ({})  ncclComm {}\n", c.blocking,
                   c.gpu_tracking ? "yes" : "no", c.untracked_ops, c.async_error, nccl_result_name(c.async_error),
                   hexs(c.comm_ptr));
        if (c.recent.empty())
            fmt::print("  recent signatures: none\n");
        else
            fmt::print("  recent signatures: {} (#{}..#{})\n", c.recent.size(), c.recent.front().seq,
                       c.recent.back().seq);
    }

    fmt::print("\nrecords: tickets {}..{}: {} valid, {} overwritten, {} torn, {} of unknown type, {} past the end\n",
               rs.first_ticket, rs.write_ticket ? rs.write_ticket - 1 : 0, rs.records.size(), rs.dropped, rs.torn,
               rs.unknown_op, rs.cut);
    if (rs.records.empty()) return 0;
    fmt::print(
        "{:>8} {:<18} {:<13} {:>6} {:>10} {:<9} {:<6} {:>5} {:<14} {:>7} {:>5} {:>11} {:>11} {:>11} {:>11} "
        "{:<8} {}\n",
        "ticket", "comm", "op", "seq", "count", "dtype", "redop", "r/p", "stream", "tid", "group", "issue_ms",
        "return_ms", "reached_ms", "done_ms", "result", "flags");
    for (const auto& r : rs.records) {
        const auto t = disk::OpType(r.op);
        fmt::print(
            "{:>8} {:<18} {:<13} {:>6} {:>10} {:<9} {:<6} {:>5} {:<14} {:>7} {:>5} {:>11} {:>11} {:>11} {:>11} "
            "{:<8} {}\n",
            r.ticket, hex(r.comm_id), disk::op_name(r.op), r.seq, r.count, disk::dtype_name(r.dtype),
            disk::has_redop(t) ? disk::redop_name(r.redop) : "-",
            r.peer_or_root >= 0 ? std::to_string(r.peer_or_root) : "-", hexs(r.stream), r.tid, r.group_id,
            rel_ms(r.t_issue_ns, start), rel_ms(r.t_return_ns, start), rel_ms(r.t_reached_ns, start),
            rel_ms(r.t_done_ns, start),
            r.result == 0    ? "ok"
            : r.result == -1 ? "pending"
                             : std::to_string(r.result),
            flags_str(r.flags));
        const auto frames = frames_of(r);
        if (!frames.empty()) {
            std::string s;
            for (uint64_t a : frames) s += " " + hexs(a);
            fmt::print("{:>8} backtrace:{}\n", "", s);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc < 2) {
            fmt::print(stderr, "{}", kUsage);
            return 2;
        }
        const std::string cmd = argv[1];
        const std::vector<std::string> args(argv + 2, argv + argc);
        if (cmd == "--help" || cmd == "-h" || cmd == "help") {
            fmt::print("{}", kUsage);
            return 0;
        }
        if (cmd == "env") return cmd_env();
        if (cmd == "analyze") return cmd_analyze(args);
        if (cmd == "dump") return cmd_dump(args);
        fmt::print(stderr, "{}: unknown command '{}'\n\n{}", kProg, cmd, kUsage);
        return 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: {}\n", kProg, e.what());
        return 2;
    }
}

// `ncclwatch-collector dump`: decode one rank file.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "ncclwatch/version.h"
#include "read/rank_file.h"
#include "report/report_json.h"

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

int run_dump(bool as_json, const std::string& path) {
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
        json out{{"schema", "ncclwatch.rank_file/1"},
                 {"ncclwatch_version", kVersionLine},
                 {"file", path},
                 {"warnings", f.warnings()},
                 {"header", header_json(h)},
                 {"comms", cj},
                 {"records", json{{"write_ticket", rs.write_ticket},
                                  {"first_ticket", rs.first_ticket},
                                  {"dropped", rs.dropped},
                                  {"unwritten", rs.unwritten},
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
        fmt::print("\ncomm slot {}: {}  rank {}/{}  {}  dev {}  pci {}{}{}{}\n", c.slot, hex(c.comm_id), c.rank,
                   c.nranks, disk::comm_state_name(c.state), c.cuda_dev,
                   c.pci_bus_id.empty() ? "-" : clean(c.pci_bus_id), c.gpu_uuid.empty() ? "" : "  " + c.gpu_uuid,
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

    fmt::print(
        "\nrecords: tickets {}..{}: {} valid, {} overwritten, {} not written (yet), {} torn, {} of unknown type, {} "
        "past "
        "the end\n",
        rs.first_ticket, rs.write_ticket ? rs.write_ticket - 1 : 0, rs.records.size(), rs.dropped, rs.unwritten,
        rs.torn, rs.unknown_op, rs.cut);
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

Command add_dump(CLI::App& sub) {
    struct Args {
        bool as_json = false;
        std::string path;
    };
    auto a = std::make_shared<Args>();
    sub.add_flag(
        "--json", a->as_json,
        "one JSON object (schema ncclwatch.rank_file/1,\ndocs/schemas/rank_file.schema.json) instead of the text");
    sub.add_option("FILE", a->path, "the rank file (*.ncw)")->type_name("");
    sub.footer(
        "Records are listed in ticket order, times in milliseconds since the file's start. Exit status: 0 "
        "decoded,\n2 usage error or unreadable file.");
    return [a] {
        if (a->path.empty()) throw UsageError("give a rank file");
        return run_dump(a->as_json, a->path);
    };
}

}  // namespace ncw::cli

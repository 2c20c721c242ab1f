#include "report/report_json.h"

#include <fmt/format.h>
#include <time.h>

#include "ncclwatch/format.h"

namespace ncw::report {

namespace disk = ::ncw::disk;

std::string clean(const std::string& s) {
    std::string out = s;
    for (auto& c : out)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return out;
}

std::string wall_time(uint64_t real_ns) {
    if (!real_ns) return "unknown time";
    const time_t s = time_t(real_ns / 1000000000ull);
    tm t{};
    localtime_r(&s, &t);
    char buf[64];
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &t);
    char zone[16];
    strftime(zone, sizeof zone, "%z", &t);
    return fmt::format("{}.{:03d} {}", buf, int(real_ns / 1000000ull % 1000), zone);
}

std::string nccl_version_str(int32_t code) {
    if (code <= 0) return "unknown";
    // NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
    if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
    return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

const char* process_state_name(uint32_t s) {
    switch (disk::ProcessState(s)) {
        case disk::ProcessState::Running: return "running";
        case disk::ProcessState::ExitedClean: return "exited cleanly";
        case disk::ProcessState::Forked: return "forked child";
    }
    return "unknown";
}

const char* nccl_result_name(int32_t r) {
    static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    if (r == -1) return "pending";
    return r >= 0 && r < 8 ? names[r] : "unknown";
}

std::string flags_str(uint8_t f) {
    static const std::pair<uint8_t, const char*> names[] = {
        {disk::kFlagInGroup, "group"},           {disk::kFlagCaptured, "captured"},
        {disk::kFlagUntracked, "untracked"},     {disk::kFlagDeferred, "deferred"},
        {disk::kFlagNonBlocking, "nonblocking"}, {disk::kFlagHasBacktrace, "bt"},
        {disk::kFlagSampledOut, "sampled_out"}};
    std::string out;
    for (const auto& [bit, name] : names)
        if (f & bit) out += (out.empty() ? "" : ",") + std::string(name);
    if (f & ~uint8_t(0x7f)) out += (out.empty() ? "" : ",") + hexs(f & ~uint8_t(0x7f));
    return out.empty() ? "-" : out;
}

json rel_ms_json(uint64_t t, uint64_t start) {
    if (!t) return nullptr;
    return double(int64_t(t - start)) / 1e6;
}

std::string dump_json(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

json op_json(const verdict::OpSig& s) {
    return json{{"seq", s.seq},
                {"op", disk::op_name(s.op)},
                {"dtype", disk::dtype_name(s.dtype)},
                {"count", s.count},
                {"redop", disk::has_redop(disk::OpType(s.op)) ? json(disk::redop_name(s.redop)) : json(nullptr)},
                {"root", disk::is_rooted(disk::OpType(s.op)) ? json(s.root) : json(nullptr)},
                {"stream", hexs(s.stream)},
                {"tid", s.tid},
                {"t_issue_ns", s.t_issue_ns},
                {"description", verdict::describe_op(s)}};
}

json header_json(const HeaderInfo& h) {
    return json{{"format", fmt::format("{}.{}", h.major, h.minor)},
                {"header_size", h.header_size},
                {"comm_slot_size", h.comm_slot_size},
                {"max_comms", h.max_comms},
                {"record_size", h.record_size},
                {"ring_capacity", h.ring_capacity},
                {"bt_depth", h.bt_depth},
                {"file_size", h.file_size},
                {"actual_size", h.actual_size},
                {"pid", h.pid},
                {"global_rank", h.global_rank},
                {"local_rank", h.local_rank},
                {"world_size", h.world_size},
                {"local_world_size", h.local_world_size},
                {"host", h.host},
                {"job_id", h.job_id},
                {"start_mono_ns", h.start_mono_ns},
                {"start_real_ns", h.start_real_ns},
                {"boot_id_hash", hex(h.boot_id_hash)},
                {"nccl_version", h.nccl_version},
                {"cuda_driver_version", h.cuda_driver_version},
                {"heartbeat_mono_ns", h.heartbeat_mono_ns},
                {"heartbeat_ms", rel_ms_json(h.heartbeat_mono_ns, h.start_mono_ns)},
                {"process_state", process_state_name(h.process_state)},
                {"num_comms", h.num_comms},
                {"write_ticket", h.write_ticket},
                {"dump_request", h.dump_request},
                {"dumps_written", h.dumps_written},
                {"reports_written", h.reports_written}};
}

json comm_json(const CommInfo& c, uint64_t start) {
    json recent = json::array();
    for (const auto& s : c.recent)
        recent.push_back(json{{"seq", s.seq},
                              {"op", disk::op_name(s.op)},
                              {"dtype", disk::dtype_name(s.dtype)},
                              {"count", s.count},
                              {"redop", s.redop},
                              {"root", s.root},
                              {"flags", s.flags},
                              {"tid", s.tid},
                              {"stream", hexs(s.stream)},
                              {"issue_ms", rel_ms_json(s.t_issue_ns, start)}});
    return json{{"slot", c.slot},
                {"state", disk::comm_state_name(c.state)},
                {"stall_flags", c.stall_flags},
                {"comm_id", hex(c.comm_id)},
                {"parent_id", c.parent_id ? json(hex(c.parent_id)) : json(nullptr)},
                {"rank", c.rank},
                {"nranks", c.nranks},
                {"cuda_dev", c.cuda_dev},
                {"blocking", c.blocking},
                {"split_color", c.split_color},
                {"split_key", c.split_key},
                {"comm_ptr", hexs(c.comm_ptr)},
                {"pci_bus_id", c.pci_bus_id},
                {"name", c.name},
                {"init_start_ms", rel_ms_json(c.t_init_start_ns, start)},
                {"init_done_ms", rel_ms_json(c.t_init_done_ns, start)},
                {"coll_issued", c.coll_issued},
                {"coll_returned", c.coll_returned},
                {"coll_reached", c.coll_reached},
                {"coll_completed", c.coll_completed},
                {"ops_issued", c.ops_issued},
                {"ops_completed", c.ops_completed},
                {"last_issue_ms", rel_ms_json(c.t_last_issue_ns, start)},
                {"last_progress_ms", rel_ms_json(c.t_last_progress_ns, start)},
                {"p2p_sends", c.p2p_sends},
                {"p2p_recvs", c.p2p_recvs},
                {"async_error", c.async_error},
                {"gpu_tracking", c.gpu_tracking != 0},
                {"stall_since_ms", rel_ms_json(c.stall_since_ns, start)},
                {"untracked_ops", c.untracked_ops},
                {"recent", recent}};
}

json record_json(const Record& r, uint64_t start, const std::vector<uint64_t>& frames) {
    json o{{"ticket", r.ticket},
           {"comm_id", hex(r.comm_id)},
           {"comm_slot", r.comm_slot},
           {"op", disk::op_name(r.op)},
           {"seq", r.seq},
           {"op_index", r.op_index},
           {"count", r.count},
           {"dtype", disk::dtype_name(r.dtype)},
           {"redop", disk::has_redop(disk::OpType(r.op)) ? json(disk::redop_name(r.redop)) : json(nullptr)},
           {"peer_or_root", r.peer_or_root},
           {"sendbuf", hexs(r.sendbuf)},
           {"recvbuf", hexs(r.recvbuf)},
           {"stream", hexs(r.stream)},
           {"tid", r.tid},
           {"group_id", r.group_id},
           {"issue_ms", rel_ms_json(r.t_issue_ns, start)},
           {"return_ms", rel_ms_json(r.t_return_ns, start)},
           {"reached_ms", rel_ms_json(r.t_reached_ns, start)},
           {"done_ms", rel_ms_json(r.t_done_ns, start)},
           {"result", r.result},
           {"flags", flags_str(r.flags)}};
    if (!frames.empty()) {
        json f = json::array();
        for (uint64_t a : frames) f.push_back(hexs(a));
        o["backtrace"] = f;
    }
    return o;
}

std::string format_ranks(const std::vector<int>& ranks) { return ::ncw::format_ranks(ranks); }

json verdict_json(const verdict::Verdict& v, const std::string& job_id) {
    return json{{"kind", verdict::kind_name(v.kind)},
                {"job_id", job_id},
                {"comm_id", hex(v.comm_id)},
                {"seq", v.seq},
                {"culprits", v.culprits},
                {"waiting", v.waiting},
                {"missing", v.missing},
                {"op", op_json(v.op)},
                {"stalled_for_s", v.stalled_for_s},
                {"summary", v.summary},
                {"evidence", v.evidence}};
}

}  // namespace ncw::report

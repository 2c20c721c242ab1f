#include "report/report_json.h"

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "ncclwatch/format.h"
#include "ncclwatch/format_fields.h"

namespace ncw::report {

namespace disk = ::ncw::disk;

std::string clean(const std::string& s) {
    std::string out = s;
    for (auto& c : out)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return out;
}

const char* nccl_result_name(int32_t r) {
    if (r == -1) return "pending";  // a record's result until its call returned
    return text::nccl_result_name(r, "unknown");
}

std::string flags_str(uint8_t f) {
    std::string out;
    for (unsigned bit = 0; bit < 8; ++bit)
        if (const char* name = (f & (1u << bit)) ? disk::flag_name(uint8_t(1u << bit)) : nullptr)
            out += (out.empty() ? "" : ",") + std::string(name);
    const uint8_t unknown = f & ~disk::kKnownRecordFlags;
    if (unknown) out += (out.empty() ? "" : ",") + hexs(unknown);
    return out.empty() ? "-" : out;
}

json rel_ms_json(uint64_t t, uint64_t start) {
    if (!t) return nullptr;
    return double(int64_t(t - start)) / 1e6;
}

std::string dump_json(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

void add_progress_basis(json& row, const verdict::RankCommState& r) {
    // A file from before 1.4 says gpu_tracking only: its counts come from CUDA events.
    const uint32_t src = r.gpu_source || !r.gpu_tracking ? r.gpu_source : uint32_t(disk::GpuSource::Events);
    row["gpu_source"] = disk::gpu_source_name(src);
    row["progress_exact"] = !r.gpu_tracking || r.progress_exact;
    row["unreached"] = r.unreached;
    row["uncompleted"] = r.uncompleted;
}

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

namespace {

// How one field renders, by its SHOW column in include/ncclwatch/format_fields.h. `start` is the file's start (mono
// instants render as milliseconds after it), `op` the operation of the record being rendered (for redop).
struct ShowContext {
    uint64_t start = 0;
    uint8_t op = 0;
};

// "t_init_start_ns" -> "init_start_ms", "stall_since_ns" -> "stall_since_ms".
std::string ms_key(std::string_view name) {
    if (name.substr(0, 2) == "t_") name.remove_prefix(2);
    if (name.size() > 3 && name.substr(name.size() - 3) == "_ns") name.remove_suffix(3);
    return std::string(name) + "_ms";
}

template <class T>
void show_num(json& j, const char* key, const T& v, const ShowContext&) {
    j[key] = v;
}
template <class T>
void show_hidden(json&, const char*, const T&, const ShowContext&) {}
void show_id(json& j, const char* key, uint64_t v, const ShowContext&) { j[key] = hex(v); }
void show_id0(json& j, const char* key, uint64_t v, const ShowContext&) { j[key] = v ? json(hex(v)) : json(nullptr); }
void show_ptr(json& j, const char* key, uint64_t v, const ShowContext&) { j[key] = hexs(v); }
void show_mono(json& j, const char* key, uint64_t v, const ShowContext& ctx) {
    j[ms_key(key)] = rel_ms_json(v, ctx.start);
}
void show_op(json& j, const char* key, uint8_t v, const ShowContext&) { j[key] = disk::op_name(v); }
void show_dtype(json& j, const char* key, uint8_t v, const ShowContext&) { j[key] = disk::dtype_name(v); }
void show_redop(json& j, const char* key, int32_t v, const ShowContext& ctx) {
    j[key] = disk::has_redop(disk::OpType(ctx.op)) ? json(disk::redop_name(v)) : json(nullptr);
}
void show_cstate(json& j, const char* key, uint32_t v, const ShowContext&) { j[key] = disk::comm_state_name(v); }
void show_gsource(json& j, const char* key, uint32_t v, const ShowContext&) { j[key] = disk::gpu_source_name(v); }
void show_pstate(json& j, const char* key, uint32_t v, const ShowContext&) { j[key] = disk::process_state_name(v); }
void show_ekind(json& j, const char* key, uint32_t v, const ShowContext&) { j[key] = disk::end_kind_name(v); }
void show_flag(json& j, const char* key, uint32_t v, const ShowContext&) { j[key] = v != 0; }
void show_pyreason(json& j, const char* key, uint32_t v, const ShowContext&) {
    j[key] = disk::py_stacks_reason_name(v);
}
void show_pystatus(json& j, const char* key, uint32_t v, const ShowContext&) {
    j[key] = disk::py_stacks_status_name(v);
}
void show_rflags(json& j, const char* key, uint8_t v, const ShowContext&) { j[key] = flags_str(v); }
void show_rorigin(json& j, const char* key, uint8_t v, const ShowContext&) { j[key] = disk::record_origin_name(v); }

}  // namespace

// X(TYPE, NAME, INIT, SHOW, ...) -> show_SHOW(j, "NAME", in.NAME, ctx); `j`, `in`, `ctx` in scope.
#define NCW_SHOW_FIELD(type, name, init, show, ...) show_##show(j, #name, in.name, ctx);

json header_json(const HeaderInfo& in) {
    json j = json::object();
    const ShowContext ctx{in.start_mono_ns, 0};
    j["format"] = fmt::format("{}.{}", in.major, in.minor);
    NCW_HEADER_LAYOUT_FIELDS(NCW_SHOW_FIELD)
    j["actual_size"] = in.actual_size;
    NCW_HEADER_WRITER_FIELDS(NCW_SHOW_FIELD)
    NCW_HEADER_LIVE_FIELDS(NCW_SHOW_FIELD)
    j["heartbeat_ms"] = rel_ms_json(in.heartbeat_mono_ns, in.start_mono_ns);
    if (in.minor >= 5) {
        NCW_HEADER_PY_STACKS_FIELDS(NCW_SHOW_FIELD)
        j["py_stacks_ms"] = rel_ms_json(in.py_stacks_mono_ns, in.start_mono_ns);
        NCW_HEADER_TAIL_FIELDS(NCW_SHOW_FIELD)
    }
    if (in.minor >= 8) {
        NCW_HEADER_PY_HELD_FIELDS(NCW_SHOW_FIELD)
        j["py_held_ms"] = rel_ms_json(in.py_held_mono_ns, in.start_mono_ns);
    }
    if (in.minor >= 9) {
        NCW_HEADER_LAST_WORDS_FIELDS(NCW_SHOW_FIELD)
        NCW_HEADER_TEARDOWN_FIELDS(NCW_SHOW_FIELD)
        NCW_HEADER_END_CAUSE_FIELDS(NCW_SHOW_FIELD)
        NCW_HEADER_ABSORBED_FIELDS(NCW_SHOW_FIELD)
    }
    if (in.minor >= 15) NCW_HEADER_NOTES_FIELDS(NCW_SHOW_FIELD)
    return j;
}

json sig_json(const SigInfo& in, uint64_t start) {
    json j = json::object();
    const ShowContext ctx{start, in.op};
    NCW_SIG_FIELDS(NCW_SHOW_FIELD)
    return j;
}

json comm_json(const CommInfo& in, uint64_t start) {
    json j = json::object();
    const ShowContext ctx{start, 0};
    j["slot"] = in.slot;
    NCW_COMM_FIELDS(NCW_SHOW_FIELD)
    json recent = json::array();
    for (const auto& s : in.recent) recent.push_back(sig_json(s, start));
    j["recent"] = std::move(recent);
    return j;
}

json record_json(const Record& in, uint64_t start, const std::vector<uint64_t>& frames) {
    json j = json::object();
    const ShowContext ctx{start, in.op};
    j["ticket"] = in.ticket;
    NCW_RECORD_FIELDS(NCW_SHOW_FIELD)
    if (!frames.empty()) {
        json f = json::array();
        for (uint64_t a : frames) f.push_back(hexs(a));
        j["backtrace"] = f;
    }
    return j;
}

#undef NCW_SHOW_FIELD

std::string format_ranks(const std::vector<int>& ranks) { return ::ncw::format_ranks(ranks); }

const char* role_name(verdict::Role r) {
    switch (r) {
        case verdict::Role::None: return "none";
        case verdict::Role::Initiating: return "initiating";
        case verdict::Role::Cascade: return "cascade";
    }
    return "none";
}

void add_drift_json(json& j, const verdict::Verdict& v) {
    if (const auto& d = v.drift) {
        json ops = json::array();
        for (const auto& s : d->ops) ops.push_back(op_json(s));
        j["drift"] = json{{"rank", d->rank},
                          {"shift", d->shift},
                          {"first_seq", d->first_seq},
                          {"last_seq", d->last_seq},
                          {"from_window", d->from_window},
                          {"odd_from", d->odd_from},
                          {"odd_to", d->odd_to},
                          {"aligned", d->aligned},
                          {"differing", d->explained},
                          {"ops", ops},
                          {"words", verdict::drift_words(*d)}};
    }
    if (v.consequence) {
        j["consequence"] = true;
        j["consequence_of"] = v.consequence_of;
    }
    if (!v.cycle.empty()) {
        json links = json::array();
        for (const auto& l : v.cycle) {
            json link{{"comm_id", hex(l.comm_id)},
                      {"seq", l.seq},
                      {"op", op_json(l.op)},
                      {"waiting", l.waiting},
                      {"waiting_global", l.waiting_global},
                      {"for_global", l.for_global}};
            // A cycle of sends and receives: whether the peer posted the match, and the op of its own it waits behind.
            if (disk::is_p2p(disk::OpType(l.op.op))) {
                link["match_posted"] = l.match_posted;
                link["behind"] = op_json(l.behind);
            }
            links.push_back(std::move(link));
        }
        j["cycle"] = std::move(links);
    }
    if (v.unposted) j["unposted"] = true;
    if (const auto& p = v.pair_sizes)
        j["pair_sizes"] = json{{"sender", p->sender},      {"receiver", p->receiver}, {"send", op_json(p->send)},
                               {"recv", op_json(p->recv)}, {"grouped", p->grouped},   {"pairs", p->pairs}};
    if (!v.setting.empty()) j["setting"] = v.setting;
    if (!v.completed_it.empty()) j["completed_it"] = v.completed_it;
}

void put_rank_list(json& j, const std::string& name, const std::vector<int>& ranks) {
    if (ranks.size() <= kMaxListedRanks) {
        j[name] = ranks;
        return;
    }
    j[name] = std::vector<int>(ranks.begin(), ranks.begin() + std::ptrdiff_t(kMaxListedRanks));
    j[name + "_count"] = ranks.size();
}

json verdict_json(const verdict::Verdict& v, const std::string& job_id) {
    json j{{"kind", verdict::kind_name(v.kind)},
           {"job_id", job_id},
           {"comm_id", hex(v.comm_id)},
           {"role", role_name(v.role)},
           {"caused_by_comm", v.caused_by_comm ? json(hex(v.caused_by_comm)) : json(nullptr)},
           {"seq", v.seq},
           {"waiting", v.waiting},
           {"op", op_json(v.op)},
           {"stalled_for_s", v.stalled_for_s},
           {"summary", v.summary},
           {"evidence", v.evidence},
           {"suspected", v.suspected}};
    put_rank_list(j, "culprits", v.culprits);
    put_rank_list(j, "missing", v.missing);
    add_drift_json(j, v);
    return j;
}

json py_stacks_json(uint32_t status, uint32_t reason, const py::Stacks* stacks, const std::string& note, uint32_t tid) {
    json j{{"status", disk::py_stacks_status_name(status)}, {"reason", disk::py_stacks_reason_name(reason)}};
    if (!note.empty()) j["note"] = note;
    if (!stacks) return j;
    auto frame_json = [](const py::Frame& f) {
        return json{{"file", f.file}, {"line", f.line}, {"function", f.func}, {"user", !py::is_library_file(f.file)}};
    };
    const py::Thread* main = py::nccl_thread(*stacks, tid);
    if (main) {
        const py::Where w = py::where(*main);
        j["nccl_thread"] = hexs(main->ident);
        if (w.known) {
            j["where"] = frame_json(w.at);
            j["where"]["callee"] = w.callee;
            j["where"]["caller"] = w.has_caller ? frame_json(w.caller) : json(nullptr);
            j["where_text"] = py::where_words(w);
        }
    }
    json threads = json::array();
    for (const py::Thread& t : stacks->threads) {
        json frames = json::array();
        for (const py::Frame& f : t.frames) frames.push_back(frame_json(f));
        bool issued = false;
        for (const py::NcclThread& n : stacks->nccl_threads) issued = issued || n.ident == t.ident;
        threads.push_back(json{{"ident", hexs(t.ident)},
                               {"issued_nccl", issued},
                               {"truncated", t.truncated},
                               {"frames", std::move(frames)}});
    }
    j["threads"] = std::move(threads);
    return j;
}

uint32_t newest_tid(const verdict::RankCommState& r) {
    uint64_t seq = 0;
    uint32_t tid = 0;
    for (const verdict::OpSig& g : r.recent)
        if (g.seq > seq) seq = g.seq, tid = g.tid;
    return tid;
}

json py_stacks_json(const verdict::RankCommState& r, uint32_t tid) {
    return py_stacks_json(r.py_stacks_status, r.py_stacks_reason, r.py_stacks.get(), r.py_stacks_note,
                          tid ? tid : newest_tid(r));
}

}  // namespace ncw::report

// Chrome trace event format writer for an analysis (see report_trace.h). Written by hand, event by event: a full
// default ring is 16,384 records per rank, so building one JSON tree for a big job would cost gigabytes.
#include "report/report_trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "ncclwatch/format.h"
#include "read/rank_file.h"
#include "report/headline.h"
#include "report/report_json.h"

namespace ncw::report {

namespace {

std::string quote(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Where one rank file's events go.
struct Track {
    int pid = 0;      // the host's process id in the trace
    int64_t tid = 0;  // the rank's thread id in the trace
    const JobResult* job = nullptr;
};

class Writer {
public:
    explicit Writer(FILE* f) : f_(f) { buf_.reserve(1 << 20); }
    void event(const std::string& body) {
        if (count_++) buf_ += ",\n";
        buf_ += body;
        if (buf_.size() > (1 << 20)) flush();
    }
    void raw(const std::string& s) { buf_ += s; }
    bool flush() {
        const bool ok = fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
        buf_.clear();
        ok_ = ok_ && ok;
        return ok_;
    }
    size_t count() const { return count_; }
    bool ok() const { return ok_; }

private:
    FILE* f_;
    std::string buf_;
    size_t count_ = 0;
    bool ok_ = true;
};

}  // namespace

bool write_trace(const Analysis& a, const std::string& path, const TraceOptions& opt, TraceStats* stats,
                 std::string* error) {
    // 0640 like the shim's files, whatever the umask would let fopen give (0666 under umask 000).
    FILE* f = stdout;
    if (path != "-") {
        const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        f = fd < 0 ? nullptr : fdopen(fd, "w");
        if (!f && fd >= 0) close(fd);
    }
    if (!f) {
        if (error) *error = path + ": " + strerror(errno);
        return false;
    }
    std::map<std::string, const JobResult*> job_of;
    for (const auto& j : a.jobs) job_of[j.job_id] = &j;

    // Times are microseconds since the earliest file start, in wall-clock time.
    struct Opened {
        RankFile file;
        HeaderInfo header;
        Track track;
    };
    std::vector<Opened> opened;
    uint64_t origin = UINT64_MAX;
    for (const auto& s : a.files) {
        if (!s.ok) continue;
        Opened o;
        if (!o.file.open(s.path)) continue;
        o.header = o.file.header();
        if (o.header.start_real_ns) origin = std::min(origin, o.header.start_real_ns);
        opened.push_back(std::move(o));
    }
    if (origin == UINT64_MAX) origin = 0;
    const bool many_jobs = a.jobs.size() > 1;

    Writer w(f);
    w.raw(
        "{\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"tool\": \"ncclwatch-collector analyze --trace\", "
        "\"clock\": \"wall-clock microseconds since " +
        wall_time(origin) + "\"},\n\"traceEvents\": [\n");

    auto real_us = [&](const HeaderInfo& h, uint64_t mono) -> double {
        const uint64_t real = mono - h.start_mono_ns + h.start_real_ns;
        return double(int64_t(real - origin)) / 1e3;
    };
    auto now_us = [&](const JobResult* j) -> double {
        return j && j->now_real_ns ? double(int64_t(j->now_real_ns - origin)) / 1e3 : 0.0;
    };

    w.event(R"({"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"verdicts"}})");
    // Hosts become processes, ranks threads.
    std::map<std::pair<std::string, std::string>, int> host_pid;
    std::map<std::string, Track> track_of_path;
    for (auto& o : opened) {
        const auto it = job_of.find(o.header.job_id);
        o.track.job = it == job_of.end() ? nullptr : it->second;
        auto [hp, fresh] = host_pid.emplace(std::make_pair(o.header.job_id, o.header.host), int(host_pid.size() + 1));
        o.track.pid = hp->second;
        o.track.tid = o.header.global_rank >= 0 ? o.header.global_rank : 1000000 + o.header.pid;
        if (fresh) {
            const std::string name = (many_jobs ? "job " + o.header.job_id + " / " : std::string()) + "host " +
                                     (o.header.host.empty() ? "?" : o.header.host);
            w.event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})",
                                o.track.pid, quote(name)));
        }
        int gpu = -1;
        for (const auto& c : o.file.comms())
            if (c.cuda_dev >= 0) {
                gpu = c.cuda_dev;
                break;
            }
        const std::string tname = fmt::format("rank {} (pid {}{})", o.header.global_rank, o.header.pid,
                                              gpu >= 0 ? fmt::format(", GPU {}", gpu) : std::string());
        w.event(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})", o.track.pid,
                            o.track.tid, quote(tname)));
        w.event(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                            o.track.pid, o.track.tid, o.track.tid));
        track_of_path[o.file.path()] = o.track;
    }

    size_t files_read = 0;
    std::string line;
    for (auto& o : opened) {
        const HeaderInfo& h = o.header;
        if (!h.start_real_ns) continue;  // no anchor: cannot be placed on the shared time axis
        ++files_read;
        // Only the newest records are read when the trace keeps only those: the ring holds the rest.
        const uint64_t since =
            opt.max_ops_per_rank && h.write_ticket > opt.max_ops_per_rank ? h.write_ticket - opt.max_ops_per_rank : 0;
        const RecordSet rs = o.file.records(since);
        const double now = now_us(o.track.job);
        const size_t first = opt.max_ops_per_rank && rs.records.size() > opt.max_ops_per_rank
                                 ? rs.records.size() - opt.max_ops_per_rank
                                 : 0;
        for (size_t k = first; k < rs.records.size(); ++k) {
            const Record& r = rs.records[k];
            if (!r.t_issue_ns || r.t_issue_ns < h.start_mono_ns) continue;
            const disk::OpType t = disk::OpType(r.op);
            const double ts = real_us(h, r.t_issue_ns);
            if (!disk::is_collective(t) && !disk::is_p2p(t)) {
                w.event(fmt::format(
                    R"({{"ph":"i","s":"t","name":"{}","cat":"lifecycle","pid":{},"tid":{},"ts":{:.3f},"args":{{"comm":"{}","result":{}}}}})",
                    disk::op_name(r.op), o.track.pid, o.track.tid, ts, hex(r.comm_id), r.result));
                continue;
            }
            const bool done = r.t_done_ns >= r.t_issue_ns && r.t_done_ns != 0;
            double end = done ? real_us(h, r.t_done_ns) : now;
            if (end < ts) end = ts;
            line = fmt::format(
                R"({{"ph":"X","name":"{} #{}{}{}","cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},)",
                disk::op_name(r.op), r.seq, disk::is_p2p(t) ? fmt::format(" peer {}", r.peer_or_root) : std::string(),
                done ? "" : " (outstanding)", disk::is_p2p(t) ? "p2p" : "collective", o.track.pid, o.track.tid, ts,
                end - ts);
            line += fmt::format(
                R"("args":{{"comm":"{}","seq":{},"count":{},"dtype":"{}","stream":"{}","flags":"{}","outstanding":{})",
                hex(r.comm_id), r.seq, r.count, disk::dtype_name(r.dtype), hexs(r.stream), flags_str(r.flags),
                done ? "false" : "true");
            if (r.t_reached_ns) line += fmt::format(R"(,"reached_us":{:.3f})", real_us(h, r.t_reached_ns));
            line += "}}";
            w.event(line);
        }
    }

    // Python stacks (format 1.5): an instant at their capture on the rank's track, the NCCL thread's frames in its
    // args.
    for (auto& o : opened) {
        const HeaderInfo& h = o.header;
        if (!h.start_real_ns || !h.py_stacks || h.py_stacks_mono_ns < h.start_mono_ns) continue;
        const py::Thread* t = py::nccl_thread(*h.py_stacks);
        if (!t) continue;
        const py::Where where = py::where(*t);
        std::string frames;
        for (const py::Frame& f : t->frames) frames += py::frame_words(f) + "\n";
        w.event(fmt::format(
            R"({{"ph":"i","s":"t","name":{},"cat":"python","pid":{},"tid":{},"ts":{:.3f},"args":{{"reason":{},"threads":{},"frames":{}}}}})",
            quote("python: " + (where.known ? py::where_words(where) : std::string("no frame"))), o.track.pid,
            o.track.tid, real_us(h, h.py_stacks_mono_ns), quote(disk::py_stacks_reason_name(h.py_stacks_reason)),
            h.py_stacks->threads.size(), quote(frames)));
    }

    // Verdicts: one global instant at the moment the stall began (or at "now"), and one on each culprit's track.
    for (const auto& ref : a.all_verdicts()) {
        const auto& v = *ref.verdict;
        const JobResult& j = *ref.job;
        double at = now_us(&j);
        if (v.stalled_for_s > 0 && j.now_real_ns) at -= v.stalled_for_s * 1e6;
        const std::string name = fmt::format("{} {}", verdict::kind_name(v.kind), hex(v.comm_id));
        const std::string args = fmt::format(R"({{"headline":{},"summary":{}}})",
                                             quote(verdict_headline(j, *ref.comm, v)), quote(v.summary));
        w.event(fmt::format(R"({{"ph":"i","s":"g","name":{},"cat":"verdict","pid":0,"tid":0,"ts":{:.3f},"args":{}}})",
                            quote(name), at, args));
        for (int cr : v.culprits)
            for (const auto& rs : ref.comm->view.ranks)
                if (rs.comm_rank == cr) {
                    const auto t = track_of_path.find(rs.file);
                    if (t == track_of_path.end()) continue;
                    w.event(fmt::format(
                        R"({{"ph":"i","s":"t","name":{},"cat":"verdict","pid":{},"tid":{},"ts":{:.3f},"args":{}}})",
                        quote("culprit: " + name), t->second.pid, t->second.tid, now_us(&j), args));
                }
    }
    w.raw("\n]}\n");
    bool ok = w.flush();
    ok = (path == "-" ? fflush(f) == 0 : fclose(f) == 0) && ok;
    if (!ok && error) *error = path + ": write failed: " + strerror(errno);
    if (stats) {
        stats->files = files_read;
        stats->events = w.count();
    }
    return ok;
}

}  // namespace ncw::report

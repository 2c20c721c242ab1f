#include "report/story.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "report/headline.h"
#include "report/report_json.h"

namespace ncw::report {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxReportBytes = 16u << 20;
// Every rank that waited in a stall writes a report of it: at thousands of ranks the story is in the first thousands,
// and parsing them all would cost `analyze` seconds. Past these, the rest are not read, and the analysis says so.
constexpr size_t kMaxReportDocs = 4096;
constexpr size_t kMaxReportTotalBytes = 256u << 20;

// Reading a document someone else may have written: a field of the wrong type reads as absent.
const json* field(const json& o, const char* key) {
    if (!o.is_object()) return nullptr;
    const auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
}
std::string str(const json& o, const char* key) {
    const json* f = field(o, key);
    return f && f->is_string() ? f->get<std::string>() : std::string();
}
double num(const json& o, const char* key) {
    const json* f = field(o, key);
    return f && f->is_number() ? f->get<double>() : 0.0;
}
// A count or a rank: whole, in range (a double out of an integer's range converts to nothing defined).
int64_t whole(const json& o, const char* key) {
    const double v = num(o, key);
    return v >= -1e15 && v <= 1e15 ? int64_t(v) : 0;
}
uint64_t id_of(const json& o, const char* key) {
    const std::string s = str(o, key);
    return s.rfind("0x", 0) == 0 ? strtoull(s.c_str() + 2, nullptr, 16) : 0;
}

// The verdict a report led with: the initiating one (a cascade's event lists its cause first), else the first.
const json* lead_of_event(const json& event) {
    const json* vs = field(event, "verdicts");
    if (!vs || !vs->is_array() || vs->empty()) return nullptr;
    for (const json& v : *vs)
        if (str(v, "role") == "initiating") return &v;
    return vs->front().is_object() ? &vs->front() : nullptr;
}

// "rank 0 held AllReduce #11 for 19.6 s in validate (train.py:48)", or, without one culprit, what stalled and the
// kind it was judged then.
std::string stall_words(const json& v, double duration_s) {
    const json* op = field(v, "op");
    const std::string op_name = op ? str(*op, "op") : std::string();
    const uint64_t seq = uint64_t(std::max<int64_t>(0, whole(v, "seq")));
    const std::string what = fmt::format("{} #{}", op_name.empty() ? "op" : op_name, seq);
    const json* culprits = field(v, "culprits_where");
    if (culprits && culprits->is_array() && culprits->size() == 1) {
        const json& c = culprits->front();
        const json* g = field(c, "global_rank");
        const std::string who = g && g->is_number_integer() ? fmt::format("rank {}", g->get<int64_t>())
                                                            : fmt::format("comm rank {}", whole(c, "comm_rank"));
        const std::string where = str(c, "python_where");
        return fmt::format("{} held {} for {:.1f} s{}", who, what, duration_s, where.empty() ? "" : " in " + where);
    }
    return fmt::format("{} on communicator {} stalled for {:.1f} s (judged {} then: {})", what, str(v, "comm_id"),
                       duration_s, str(v, "kind"), str(v, "headline"));
}

struct Open {
    json event;
    bool suspected_only = true;
};

// The entries of one document: each stall or suspicion paired with the recovery that ended it.
void entries_of(const json& doc, std::vector<StoryEntry>& out) {
    const json* process = field(doc, "process");
    const std::string job = process ? str(*process, "job_id") : std::string();
    const json* events = field(doc, "events");
    if (!events || !events->is_array()) return;
    std::map<uint64_t, Open> open;  // by communicator
    for (const json& e : *events) {
        const std::string type = str(e, "type");
        const uint64_t comm = id_of(e, "comm_id");
        if (!comm || field(e, "init")) continue;  // an init is told from the files
        if (type == "stall" || type == "suspected") {
            Open& o = open[comm];
            if (o.event.is_null() || type == "stall") o.event = e;
            o.suspected_only = o.suspected_only && type == "suspected";
        } else if (type == "recovered") {
            const auto it = open.find(comm);
            if (it == open.end()) continue;
            const json* v = lead_of_event(it->second.event);
            StoryEntry s;
            s.kind = it->second.suspected_only ? StoryEntry::Kind::SuspicionCleared : StoryEntry::Kind::Recovered;
            s.time = str(it->second.event, "time");
            s.job_id = job;
            s.duration_s = std::max(0.0, num(e, "stalled_for_s"));
            s.comm_id = v ? id_of(*v, "comm_id") : comm;
            s.seq = uint64_t(std::max<int64_t>(0, v ? whole(*v, "seq") : whole(it->second.event, "waiting_in_seq")));
            if (v) s.verdict = *v;
            if (const json* cw = v ? field(*v, "culprits_where") : nullptr; cw && cw->is_array())
                for (const json& c : *cw)
                    if (const json* g = field(c, "global_rank");
                        g && g->is_number_integer() && g->get<int64_t>() >= 0 && g->get<int64_t>() < (1ll << 30))
                        s.culprits.push_back(int(g->get<int64_t>()));
            out.push_back(std::move(s));
            open.erase(it);
        } else if (type == "ended_by_error") {
            open.erase(comm);  // an end, not a recovery: the rank files tell how it stands
        }
    }
}

// Where the init of each communicator waited past the ranks' stall timeout and then finished (every visible rank's
// init returned, none missing): who began late, from the files' init times on the job's clock.
void init_waits(const Analysis& a, std::vector<StoryEntry>& out) {
    for (const JobResult& j : a.jobs) {
        uint32_t timeout_ms = 0;
        for (const FileSummary& f : a.files)
            if (f.ok && f.job_id == j.job_id && f.timeout_ms && (!timeout_ms || f.timeout_ms < timeout_ms))
                timeout_ms = f.timeout_ms;
        if (!timeout_ms) continue;
        for (const CommResult& c : j.comms) {
            if (!c.missing.empty() || c.view.ranks.empty()) continue;
            const verdict::RankCommState* late = nullptr;
            uint64_t first = ~0ull, waited = 0;
            bool all_done = true;
            for (const verdict::RankCommState& r : c.view.ranks) {
                if (!r.t_init_start_ns || !r.t_init_done_ns || r.t_init_done_ns < r.t_init_start_ns) {
                    all_done = false;
                    break;
                }
                first = std::min(first, r.t_init_start_ns);
                waited = std::max(waited, r.t_init_done_ns - r.t_init_start_ns);
                if (!late || r.t_init_start_ns > late->t_init_start_ns) late = &r;
            }
            if (!all_done || !late || waited < uint64_t(timeout_ms) * 1000000ull) continue;
            StoryEntry s;
            s.kind = StoryEntry::Kind::InitWaited;
            s.job_id = j.job_id;
            s.comm_id = c.comm_id;
            s.duration_s = waited / 1e9;
            if (j.now_real_ns && j.now_mono_ns >= first) s.time = wall_time(j.now_real_ns - (j.now_mono_ns - first));
            const double lag_s = (late->t_init_start_ns - first) / 1e9;
            // The late rank is the cause only where its lateness accounts for most of the wait.
            const std::string who = late->global_rank >= 0 ? fmt::format("rank {}", late->global_rank)
                                                           : fmt::format("comm rank {}", late->comm_rank);
            const bool blamed = lag_s >= s.duration_s / 2;
            if (blamed && late->global_rank >= 0) s.culprits.push_back(late->global_rank);
            s.line = blamed ? fmt::format(
                                  "init of {} waited {:.1f} s for {}, which began its init {:.1f} s after the "
                                  "first",
                                  comm_words(j, c), s.duration_s, who, lag_s)
                            : fmt::format(
                                  "init of {} took {:.1f} s inside NCCL (every rank began it within {:.1f} s of "
                                  "the first)",
                                  comm_words(j, c), s.duration_s, lag_s);
            out.push_back(std::move(s));
        }
    }
}

}  // namespace

std::vector<ReportDoc> read_report_docs(const std::vector<std::string>& rank_files,
                                        std::vector<std::string>* warnings) {
    std::vector<ReportDoc> out;
    size_t total = 0, left = 0;
    for (const std::string& f : rank_files) {
        if (f.size() < 4 || f.compare(f.size() - 4, 4, ".ncw") != 0) continue;
        const std::string path = f.substr(0, f.size() - 4) + ".report.json";
        if (out.size() >= kMaxReportDocs || total >= kMaxReportTotalBytes) {
            left += access(path.c_str(), F_OK) == 0;
            continue;
        }
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            if (errno != ENOENT && warnings)
                warnings->push_back(path + ": " + strerror(errno) + " (its events skipped)");
            continue;
        }
        struct stat st {};
        std::string text;
        const char* problem = nullptr;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            problem = "not a regular file";
        else if (size_t(st.st_size) > kMaxReportBytes)
            problem = "larger than 16 MiB";
        else {
            text.resize(size_t(st.st_size));
            size_t got = 0;
            while (got < text.size()) {
                const ssize_t n = read(fd, text.data() + got, text.size() - got);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                got += size_t(n);
            }
            text.resize(got);
        }
        close(fd);
        ReportDoc d{path, json()};
        if (!problem) {
            d.doc = json::parse(text, nullptr, false);
            if (d.doc.is_discarded() || str(d.doc, "schema") != "ncclwatch.report/1") {
                problem = "not a report (schema ncclwatch.report/1)";
                d.doc = json();
            }
        }
        if (problem && warnings) warnings->push_back(path + ": " + problem + " (its events skipped)");
        total += text.size();
        if (!problem) out.push_back(std::move(d));
    }
    if (left && warnings)
        warnings->push_back(
            fmt::format("the story before the end is told from the first {} reports (.report.json, "
                        "{} MiB); {} more were not read",
                        out.size(), total >> 20, left));
    return out;
}

std::vector<StoryEntry> build_story(const Analysis& a, const std::vector<ReportDoc>& reports,
                                    std::vector<std::string>* warnings) {
    std::vector<StoryEntry> all;
    for (const ReportDoc& d : reports) {
        try {
            entries_of(d.doc, all);
        } catch (const std::exception& e) {
            if (warnings) warnings->push_back(d.path + ": events not read (" + e.what() + ")");
        }
    }
    // One entry per verdict, however many ranks reported it: the longest wait, the earliest time; a stall report
    // before a suspicion's where both came.
    std::map<std::tuple<std::string, uint64_t, uint64_t>, StoryEntry> by_verdict;
    for (StoryEntry& s : all) {
        auto [it, fresh] = by_verdict.try_emplace({s.job_id, s.comm_id, s.seq}, s);
        if (fresh) continue;
        StoryEntry& k = it->second;
        // A stall report before a suspicion's; a verdict that names its culprit before one that does not (a node
        // that saw only part of the communicator).
        const bool better = (s.kind == StoryEntry::Kind::Recovered && k.kind != StoryEntry::Kind::Recovered) ||
                            (s.kind == k.kind && k.culprits.empty() && !s.culprits.empty());
        if (better) {
            k.kind = s.kind;
            k.verdict = s.verdict;
            k.culprits = s.culprits;
        }
        k.duration_s = std::max(k.duration_s, s.duration_s);
        if (!s.time.empty() && (k.time.empty() || s.time < k.time)) k.time = s.time;
        if (k.verdict.is_null()) k.verdict = s.verdict, k.culprits = s.culprits;
    }
    std::vector<StoryEntry> out;
    for (auto& [key, s] : by_verdict) {
        const std::string words = s.verdict.is_null()
                                      ? fmt::format("collective #{} on communicator {:#018x} stalled for {:.1f} s",
                                                    s.seq, s.comm_id, s.duration_s)
                                      : stall_words(s.verdict, s.duration_s);
        s.line = (s.kind == StoryEntry::Kind::Recovered ? "recovered: " : "suspected, then recovered: ") + words;
        out.push_back(std::move(s));
    }
    init_waits(a, out);
    std::stable_sort(out.begin(), out.end(), [](const StoryEntry& x, const StoryEntry& y) { return x.time < y.time; });
    return out;
}

std::string story_headline(const std::vector<StoryEntry>& story) {
    return story.empty() ? std::string() : story.front().line + "; nothing is hung at the end";
}

json story_json(const std::vector<StoryEntry>& story) {
    json out = json::array();
    for (const StoryEntry& s : story) {
        const char* kind = s.kind == StoryEntry::Kind::Recovered          ? "recovered"
                           : s.kind == StoryEntry::Kind::SuspicionCleared ? "suspicion_cleared"
                                                                          : "init_waited";
        out.push_back(json{{"kind", kind},
                           {"time", s.time.empty() ? json(nullptr) : json(s.time)},
                           {"job_id", s.job_id},
                           {"comm_id", hex(s.comm_id)},
                           {"seq", s.seq},
                           {"duration_s", s.duration_s},
                           {"culprits", s.culprits},
                           {"line", s.line},
                           {"verdict", s.verdict}});
    }
    return out;
}

}  // namespace ncw::report

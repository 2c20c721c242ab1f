// The JSON document of an analysis (see analysis_json.h).
#include "report/analysis_json.h"

#include <algorithm>

#include "engine/env_audit.h"
#include "ncclwatch/format.h"
#include "report/headline.h"
#include "report/report_json.h"

namespace ncw::report {

namespace {

using verdict::RankCommState;

// One verdict of the document: "verdicts" and "suspected" share the shape.
json verdict_item(const Analysis::VerdictRef& ref) {
    const auto& v = *ref.verdict;
    json culprits = json::array();
    // A culprit without a file is named by its comm rank where that is its global rank.
    // Listed up to kMaxListedRanks, as every list of ranks (report_json.h): an object each, they cost the most.
    const std::vector<int> listed(v.culprits.begin(),
                                  v.culprits.begin() + std::ptrdiff_t(std::min(v.culprits.size(), kMaxListedRanks)));
    const std::vector<int> globals = global_ranks(*ref.job, *ref.comm, listed);
    for (size_t i = 0; i < listed.size(); ++i) {
        const int r = listed[i], global = globals[i];
        const RankCommState* s = find_rank(*ref.comm, r);
        const auto where = s ? python_where(*s, &v) : std::nullopt;
        culprits.push_back(json{{"comm_rank", r},
                                {"visible", s != nullptr},
                                {"global_rank", global >= 0 ? json(global) : json(nullptr)},
                                {"host", s ? json(s->host) : json(nullptr)},
                                {"pid", s ? json(s->pid) : json(nullptr)},
                                {"gpu", s ? json(s->cuda_dev) : json(nullptr)},
                                {"pci_bus_id", s ? json(s->pci_bus_id) : json(nullptr)},
                                {"gpu_uuid", s ? json(s->gpu_uuid) : json(nullptr)},
                                {"alive", s ? json(s->alive) : json(nullptr)},
                                {"python_where", where ? json(py::where_words(*where)) : json(nullptr)},
                                {"file", s ? json(s->file) : json(nullptr)}});
    }
    const uint64_t since_ns = stalled_since_real_ns(*ref.job, v);
    json j{{"job_id", ref.job->job_id},
           {"kind", verdict::kind_name(v.kind)},
           {"role", role_name(v.role)},
           {"caused_by_comm", v.caused_by_comm ? json(hex(v.caused_by_comm)) : json(nullptr)},
           {"comm_id", hex(v.comm_id)},
           {"seq", v.seq},
           {"op", op_json(v.op)},
           {"culprits", culprits},
           {"waiting", v.waiting},
           {"waiting_count", v.waiting.size()},
           {"stalled_for_s", v.stalled_for_s},
           {"stalled_since_real_ns", since_ns ? json(since_ns) : json(nullptr)},
           {"headline", verdict_headline(*ref.job, *ref.comm, v)},
           {"summary", v.summary},
           {"evidence", v.evidence}};
    if (listed.size() < v.culprits.size()) j["culprits_count"] = v.culprits.size();
    put_rank_list(j, "missing", v.missing);
    add_drift_json(j, v);
    return j;
}

}  // namespace

json audit_json(const std::vector<audit::Finding>& findings) {
    json out = json::array();
    for (const auto& f : findings)
        out.push_back(json{{"severity", audit::severity_name(f.severity)},
                           {"topic", f.topic},
                           {"summary", f.summary},
                           {"evidence", f.evidence},
                           {"global_ranks", f.ranks}});
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
            if (!c.missing.empty()) {
                missing.push_back(
                    json{{"comm_id", hex(c.comm_id)}, {"nranks", c.view.nranks}, {"text", format_ranks(c.missing)}});
                put_rank_list(missing.back(), "comm_ranks", c.missing);
            }
        const json findings = audit_json(j.audit);
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
            for (const auto& r : c.view.ranks) {
                ranks.push_back(json{{"comm_rank", r.comm_rank},
                                     {"global_rank", r.global_rank},
                                     {"host", r.host},
                                     {"pid", r.pid},
                                     {"gpu", r.cuda_dev},
                                     {"pci_bus_id", r.pci_bus_id},
                                     {"gpu_uuid", r.gpu_uuid},
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
                add_progress_basis(ranks.back(), r);
                // Format 1.5: the rank's Python stacks, where its process runs CPython (or says why not).
                if (r.py_stacks || r.py_stacks_status) ranks.back()["python"] = py_stacks_json(r);
            }
            // The shim's baseline of the gaps between completions, once it has one (format 1.4).
            for (size_t i = 0; i < c.view.ranks.size(); ++i)
                if (c.view.ranks[i].completion_gap_p99_ns)
                    ranks[i]["completion_gap_p99_ns"] = c.view.ranks[i].completion_gap_p99_ns;
            json kinds = json::array();
            for (const auto& v : c.verdicts) kinds.push_back(verdict::kind_name(v.kind));
            comms.push_back(json{{"job_id", c.job_id},
                                 {"comm_id", hex(c.comm_id)},
                                 {"parent_id", c.parent_id ? json(hex(c.parent_id)) : json(nullptr)},
                                 {"name", c.name},
                                 {"world", is_world(j, c)},
                                 {"nranks", c.view.nranks},
                                 {"verdict_kinds", kinds},
                                 {"ranks", ranks}});
            put_rank_list(comms.back(), "missing", c.missing);
            if (c.suspect_after_s > 0) comms.back()["suspect_after_s"] = c.suspect_after_s;
        }
    }

    json verdicts = json::array();
    for (const auto& ref : a.all_verdicts()) verdicts.push_back(verdict_item(ref));

    json doc{{"schema", kAnalysisSchema},
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
    // Early suspicions (engine/suspicion.h), only when there are some: the same verdicts, not yet stalls.
    json suspected = json::array();
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.suspected) suspected.push_back(verdict_item({&j, &c, &v}));
    if (!suspected.empty()) doc["suspected"] = std::move(suspected);
    return doc;
}

}  // namespace ncw::report

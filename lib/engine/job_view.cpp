// Grouping rank files into jobs and communicators with every timestamp of a job on one clock (the view builder), and
// running the verdict engine over each job's views (the judge). analyze() does both: the watchdog, the live collector
// and `ncclwatch-collector analyze` all call it.
#include "engine/job_view.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "engine/cascade.h"
#include "engine/causal.h"
#include "engine/straggler.h"
#include "engine/suspicion.h"
#include "engine/verdict_deadlock.h"
#include "engine/verdict_end.h"
#include "engine/verdict_settings.h"
#include "ncclwatch/format.h"
#include "read/plausible.h"
#include "read/text.h"
#include "read/time_base.h"

namespace ncw {

namespace {

using text::hex;
using time_base::shift;

// Larger communicators than this are taken for damage (the missing-rank list would be absurd).
constexpr int32_t kMaxRanks = 1 << 20;

constexpr double kOfflineStaleSec = 1.0;

// AnalysisOptions::cancel was set: unwinds to analyze(), which keeps what was done.
struct Cancelled {};
void check_cancel(const AnalysisOptions& opt) {
    if (opt.cancel && opt.cancel->load(std::memory_order_relaxed)) throw Cancelled{};
}

bool same_verdict(const verdict::Verdict& a, const verdict::Verdict& b) {
    return a.kind == b.kind && a.comm_id == b.comm_id && a.seq == b.seq && a.culprits == b.culprits;
}

// One communicator while its ranks are being collected.
struct Acc {
    CommResult r;
    uint32_t first_slot = UINT32_MAX;
    std::vector<uint64_t> seen;             // per view rank: last sign of life, to pick between duplicates
    std::unordered_map<int, size_t> index;  // comm rank -> position in r.view.ranks (linear in big communicators)
    bool nranks_conflict = false;
};

// "MASTER_ADDR:MASTER_PORT" from the recorded environment, "" when neither is there.
std::string master_of(const HeaderInfo& h) {
    std::string addr, port;
    for (const auto& e : h.env) {
        if (e.rfind("MASTER_ADDR=", 0) == 0) addr = e.substr(12);
        if (e.rfind("MASTER_PORT=", 0) == 0) port = e.substr(12);
    }
    if (addr.empty() && port.empty()) return "";
    return addr + ":" + port;
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
    std::vector<int> r(ranks);
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    std::string out;
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(r[i]);
        if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(r[j]);
        i = j + 1;
    }
    return out;
}

std::vector<Analysis::VerdictRef> Analysis::all_verdicts() const {
    std::vector<VerdictRef> out;
    for (const auto& j : jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts) out.push_back({&j, &c, &v});
    // Consequences (of a drift) after every lead.
    std::stable_sort(out.begin(), out.end(), [](const VerdictRef& a, const VerdictRef& b) {
        return std::pair(a.verdict->consequence, verdict_importance(a.verdict->kind)) <
               std::pair(b.verdict->consequence, verdict_importance(b.verdict->kind));
    });
    return out;
}

bool Analysis::found_problem() const {
    for (const auto& j : jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts)
                if (v.kind != verdict::Kind::Straggler) return true;  // a straggler is slow, not a hang
    return false;
}

namespace {

using JobFiles = std::vector<const FileSnapshot*>;

// ---- The view builder ----

// The clock a job is analysed on, and how liveness is judged on it.
time_base::Frame job_frame(const JobFiles& job_files, const AnalysisOptions& opt, LivenessContext& ctx) {
    time_base::Frame frame;
    if (opt.live) {
        frame.boot = this_boot_id_hash();
        frame.mono = opt.now_mono_ns ? opt.now_mono_ns : time_base::clock_ns(CLOCK_MONOTONIC);
        frame.real = opt.now_mono_ns ? opt.now_real_ns : time_base::clock_ns(CLOCK_REALTIME);
        ctx = live_context(frame.mono, opt.stale_after_s);
        return frame;
    }
    // The newest sign of life in the job is "now": a dump copied the next morning still analyses as of the hang.
    // Compared in wall-clock time, since the files may come from several hosts.
    const FileSnapshot* ref = job_files.front();
    uint64_t best = 0;
    for (const auto* f : job_files) {
        const uint64_t r = time_base::to_real(f->header, last_seen(*f));
        if (r > best) best = r, ref = f;
    }
    frame.boot = ref->header.boot_id_hash;
    frame.mono = last_seen(*ref);
    frame.real = time_base::to_real(ref->header, frame.mono);
    ctx.live = false;
    ctx.now_mono_ns = frame.mono;
    // After the fact, a process whose heartbeat stopped a second before the job's last sign of life died first
    // (torchrun then kills the others within a few hundred milliseconds).
    ctx.stale_after_s = std::min(opt.stale_after_s, kOfflineStaleSec);
    // Files of this host and boot: a pid that is gone is a process gone, whatever its last heartbeat's age (every
    // rank of a job killed at once has heartbeats as fresh as each other's).
    try {
        ctx.host = this_hostname();
    } catch (...) {
    }
    ctx.boot_id_hash = this_boot_id_hash();
    ctx.probe_pids_offline = true;
    return frame;
}

// One comm slot of one file as the engine's rank state (st: default-made), on the frame's clock (d: the file's offset
// to it).
void rank_state(const FileSnapshot& f, const HeaderInfo& h, const CommInfo& c, int64_t d, const time_base::Frame& frame,
                const LivenessContext& ctx, verdict::RankCommState& st) {
    // Copied only to move its times: on one boot (every rank, in the live collector) there is nothing to move, and
    // the copy (64 signatures) is a large part of an analysis of 131,072 ranks.
    std::optional<CommInfo> moved;
    if (d != 0) {
        moved = c;
        time_base::rebase(*moved, d);
    }
    to_rank_comm_state(h, moved ? *moved : c, f.path, ctx, st);
    st.master_addr = master_of(h);
    // Rebased exactly on one boot; through the wall clocks otherwise, as good as their NTP sync.
    st.clock_uncertainty_s = d == 0 && h.boot_id_hash == frame.boot ? 0.0 : -1.0;
    if (f.p2p_read) {
        st.p2p_known = true;
        st.p2p_wrapped = f.p2p_wrapped;
        st.p2p_as_of_ns = f.p2p_as_of_ns ? shift(f.p2p_as_of_ns, d) : 0;
        for (const auto& t : f.p2p)
            if (t.comm_id == c.comm_id) st.p2p = t.peers;
        for (auto& e : st.p2p) {
            e.t_oldest_send_pending_ns = shift(e.t_oldest_send_pending_ns, d);
            e.t_oldest_recv_pending_ns = shift(e.t_oldest_recv_pending_ns, d);
        }
    }
}

// A rank state is large (544 bytes): sorting 131,072 of them in place moves each many times. Sorted as indices, then
// moved once each; mostly they come in order already.
void sort_by_comm_rank(std::vector<verdict::RankCommState>& ranks) {
    const auto below = [](const verdict::RankCommState& x, const verdict::RankCommState& y) {
        return x.comm_rank < y.comm_rank;
    };
    if (std::is_sorted(ranks.begin(), ranks.end(), below)) return;
    std::vector<size_t> order(ranks.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return below(ranks[a], ranks[b]); });
    std::vector<verdict::RankCommState> sorted;
    sorted.reserve(ranks.size());
    for (size_t i : order) sorted.push_back(std::move(ranks[i]));
    ranks = std::move(sorted);
}

// AnalysisOptions::absent_floor: the communicators missing the fewest ranks first, as long as the job's absent ranks
// in all stay within what it reported (or the floor); the rest are set aside, said in one warning. What a set-aside
// communicator cost so far is its reported ranks' states: the claim alone sizes nothing.
void set_aside_unjustified(std::map<uint64_t, Acc>& comms, size_t floor, JobResult& jr,
                           std::vector<std::string>& warnings) {
    size_t reported = 0;
    std::vector<std::pair<size_t, uint64_t>> absent;  // (absent ranks, comm id), the fewest first
    absent.reserve(comms.size());
    for (const auto& [id, acc] : comms) {
        reported += acc.r.view.ranks.size();
        absent.emplace_back(size_t(acc.r.view.nranks) - std::min(size_t(acc.r.view.nranks), acc.r.view.ranks.size()),
                            id);
    }
    std::stable_sort(absent.begin(), absent.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    const size_t allowed = std::max(floor, reported);
    size_t used = 0, worst = 0;
    for (const auto& [n, id] : absent) {
        if (used + n <= allowed) {
            used += n;
            continue;
        }
        const auto it = comms.find(id);
        if (jr.set_aside == 0 || n > worst) {
            worst = n;
            jr.set_aside_comm = id;
            jr.set_aside_nranks = it->second.r.view.nranks;
            jr.set_aside_seen = int(it->second.r.view.ranks.size());
        }
        ++jr.set_aside;
        comms.erase(it);
    }
    if (jr.set_aside)
        warnings.push_back("job " + (jr.job_id.empty() ? std::string("(no job id)") : jr.job_id) + ": " +
                           std::to_string(jr.set_aside) +
                           " communicator(s) set aside, not analysed: their absent ranks are more than " +
                           "the job's reports justify (" + std::to_string(reported) +
                           " reported in its communicators; comm " + hex(jr.set_aside_comm) + " claims " +
                           std::to_string(jr.set_aside_nranks) + " ranks, " + std::to_string(jr.set_aside_seen) +
                           " reported)");
}

// Every communicator of one job with the ranks its files show, on one clock, in order of creation; no verdicts yet.
JobResult build_job(const std::string& job_id, const JobFiles& job_files, const AnalysisOptions& opt,
                    std::vector<std::string>& warnings) {
    const std::string job_name = job_id.empty() ? "(no job id)" : job_id;
    JobResult jr;
    jr.job_id = job_id;
    jr.files.reserve(job_files.size());
    for (const auto* f : job_files) jr.files.push_back(f->path);

    LivenessContext ctx;
    const time_base::Frame frame = job_frame(job_files, opt, ctx);
    jr.now_mono_ns = frame.mono;
    jr.now_real_ns = frame.real;

    std::map<uint64_t, Acc> comms;
    for (const auto* f : job_files) {
        check_cancel(opt);
        const int64_t d = time_base::offset_to(f->header, frame);
        // Likewise the header (its environment): copied only when its times move.
        std::optional<HeaderInfo> moved;
        if (d != 0) {
            moved = f->header;
            moved->heartbeat_mono_ns = shift(moved->heartbeat_mono_ns, d);
            moved->end_mono_ns = shift(moved->end_mono_ns, d);
            moved->last_words_mono_ns = shift(moved->last_words_mono_ns, d);
            moved->teardown_since_ns = shift(moved->teardown_since_ns, d);
            moved->abort_mono_ns = shift(moved->abort_mono_ns, d);
            moved->absorbed_mono_ns = shift(moved->absorbed_mono_ns, d);
        }
        if (const int64_t off = time_base::monotonic_shift(f->header, frame))
            warnings.push_back(fmt::format(
                "{} (rank {}): its monotonic clock runs {:.1f} s {} this boot's, as the "
                "wall clocks tell (a time namespace?): its times are moved by the wall "
                "clocks",
                f->path, f->header.global_rank, std::abs(double(off)) / 1e9, off > 0 ? "behind" : "ahead of"));
        const HeaderInfo& h = moved ? *moved : f->header;
        const uint64_t seen = shift(last_seen(*f), d);
        const uint64_t life_max = max_count_in_life(f->header);
        for (const auto& c : f->comms) {
            if (c.state == uint32_t(disk::CommState::Free)) continue;  // slot claimed, not filled in yet
            if (c.comm_id == 0) {
                warnings.push_back(f->path + ": comm slot " + std::to_string(c.slot) + " has no communicator id yet (" +
                                   disk::comm_state_name(c.state) + "); skipped");
                continue;
            }
            if (c.nranks <= 0 || c.nranks > kMaxRanks || c.rank < 0 || c.rank >= c.nranks) {
                warnings.push_back(f->path + ": comm " + hex(c.comm_id) + " (slot " + std::to_string(c.slot) +
                                   "): rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) +
                                   " is not known yet or out of range; skipped");
                continue;
            }
            if (const std::string why = impossible_counter(c, life_max); !why.empty()) {
                warnings.push_back(f->path + ": comm " + hex(c.comm_id) + ": " + why +
                                   "; this file's claims on it are set aside");
                continue;
            }
            auto& acc = comms[c.comm_id];
            if (acc.r.view.ranks.empty() && acc.r.view.nranks == 0) {
                acc.r.job_id = job_id;
                acc.r.comm_id = c.comm_id;
                acc.r.parent_id = c.parent_id;
                acc.r.view.comm_id = c.comm_id;
                acc.r.view.nranks = c.nranks;
                // A rank state is large: growing the vector moves them all, 131,072 of them several times.
                const size_t expect = std::min(size_t(c.nranks), job_files.size());
                acc.r.view.ranks.reserve(expect);
                acc.seen.reserve(expect);
                acc.index.reserve(expect);
            }
            acc.first_slot = std::min(acc.first_slot, c.slot);
            if (acc.r.name.empty()) acc.r.name = c.name;
            if (c.nranks != acc.r.view.nranks) {
                if (!acc.nranks_conflict)
                    warnings.push_back("job " + job_name + ", comm " + hex(c.comm_id) +
                                       ": ranks disagree on the communicator size (" +
                                       std::to_string(acc.r.view.nranks) + " vs " + std::to_string(c.nranks) + " in " +
                                       f->path + "); using the larger");
                acc.nranks_conflict = true;
                acc.r.view.nranks = std::max(acc.r.view.nranks, c.nranks);
            }
            auto& ranks = acc.r.view.ranks;
            auto found = acc.index.find(c.rank);
            auto it = found == acc.index.end() ? ranks.end() : ranks.begin() + ptrdiff_t(found->second);
            if (it == ranks.end()) {
                rank_state(*f, h, c, d, frame, ctx, ranks.emplace_back());
                acc.index.emplace(c.rank, ranks.size() - 1);
                acc.seen.push_back(seen);
                continue;
            }
            // Two files claim one rank: a restarted process, or one file analysed twice. The newer wins.
            verdict::RankCommState st;
            rank_state(*f, h, c, d, frame, ctx, st);
            const size_t i = size_t(it - ranks.begin());
            const bool newer = seen > acc.seen[i];
            warnings.push_back("job " + job_name + ", comm " + hex(c.comm_id) + ": rank " + std::to_string(c.rank) +
                               " appears in " + it->file + " and " + f->path + "; using " +
                               (newer ? f->path : it->file) + " (newer)");
            if (newer) {
                *it = std::move(st);
                acc.seen[i] = seen;
            }
        }
    }

    if (opt.absent_floor) set_aside_unjustified(comms, opt.absent_floor, jr, warnings);

    std::vector<Acc*> order;
    for (auto& [id, acc] : comms) order.push_back(&acc);
    std::stable_sort(order.begin(), order.end(),
                     [](const Acc* x, const Acc* y) { return x->first_slot < y->first_slot; });
    for (Acc* acc : order) {
        check_cancel(opt);
        CommResult& r = acc->r;
        sort_by_comm_rank(r.view.ranks);
        std::vector<bool> seen_rank(size_t(r.view.nranks), false);
        for (const auto& s : r.view.ranks) seen_rank[size_t(s.comm_rank)] = true;
        for (int i = 0; i < r.view.nranks; ++i)
            if (!seen_rank[size_t(i)]) r.missing.push_back(i);
        if (!r.missing.empty())
            warnings.push_back("job " + job_name + ", comm " + hex(r.comm_id) + ": " +
                               (r.missing.size() == 1 ? "rank " : "ranks ") + format_ranks(r.missing) + " of " +
                               std::to_string(r.view.nranks) +
                               " not visible (no rank file here; normal when other nodes' files were not gathered)");
        jr.comms.push_back(std::move(r));
    }
    return jr;
}

// ---- The judge ----

// The verdicts of one communicator's view at jr.now_mono_ns, in the order the engine found them.
// `teardown_timeout_s`: how long a teardown call must last to be a hang (the ranks' own timeout after the end, where
// stalls are judged at 0: a teardown a kill interrupted is no hang).
void judge_comm(CommResult& r, uint64_t now_mono_ns, const AnalysisOptions& opt,
                const std::vector<const verdict::CommView*>& job_views, double teardown_timeout_s) {
    if (opt.mismatches) r.verdicts = verdict::find_mismatches(r.view);
    if (opt.stalls) {
        // diagnose_stall repeats the mismatch at the stalled seq: keep one copy, the stall's (it knows who waits and
        // for how long).
        for (auto& v : verdict::diagnose_stall(r.view, now_mono_ns, opt.timeout_s)) {
            auto dup = std::find_if(r.verdicts.begin(), r.verdicts.end(),
                                    [&](const verdict::Verdict& x) { return same_verdict(x, v); });
            if (dup != r.verdicts.end())
                *dup = std::move(v);
            else
                r.verdicts.push_back(std::move(v));
        }
        // One verdict per event: a drift joins the stall's NOT_JOINED / EXTRA_OP of its rank, the hang it ends in
        // and its MISMATCHes are its consequences.
        verdict::fold_drifts(r.verdicts);
        for (auto& v : verdict::diagnose_teardown(r.view, now_mono_ns, teardown_timeout_s))
            r.verdicts.push_back(std::move(v));
    }
    r.suspect_after_s = verdict::comm_suspect_after_s(r.view);
    if (opt.stalls && opt.suspicion && std::all_of(r.verdicts.begin(), r.verdicts.end(), [](const verdict::Verdict& v) {
            return v.kind == verdict::Kind::Mismatch || verdict::drift_only(v);
        }))
        r.suspected = r.suspect_after_s > 0 ? verdict::diagnose_suspicion(r.view, now_mono_ns, opt.timeout_s)
                                            : verdict::diagnose_init_suspicion(r.view, now_mono_ns, opt.timeout_s);
    if (opt.stragglers) {
        const bool exact = std::all_of(r.view.ranks.begin(), r.view.ranks.end(),
                                       [](const auto& x) { return x.clock_uncertainty_s == 0; });
        r.view.clock_note =
            exact ? "one boot's monotonic clock (exact)" : "clock offsets from wall clocks, uncertainty unknown (NTP)";
        for (auto& v : verdict::find_stragglers(r.view, {}, &job_views)) r.verdicts.push_back(std::move(v));
    }
}

// The shortest nonzero value of a header's field in milliseconds (a timeout) among the job's readable files, in
// seconds; 0: no file has one.
double shortest_s(const JobFiles& job_files, uint32_t HeaderInfo::*field_ms) {
    uint32_t ms = 0;
    for (const FileSnapshot* f : job_files)
        if (f && f->ok && f->header.*field_ms && (!ms || f->header.*field_ms < ms)) ms = f->header.*field_ms;
    return ms / 1000.0;
}

// Every communicator's verdicts, then the job-level ones: which stalled communicator initiated and which wait
// because of it, and the environment audit of the job's processes.
void judge_job(JobResult& jr, const JobFiles& job_files, const AnalysisOptions& opt,
               std::vector<std::string>& warnings) {
    // The first departure or failure of the job is where its trouble began; what came after is put back (causal.h).
    std::vector<verdict::CommView*> views;
    for (auto& c : jr.comms) views.push_back(&c.view);
    // The ranks torch's watchdog ended, as their files say before the causal order puts them back (verdict_end.h).
    const std::vector<verdict::WatchdogEnd> torch_ends = verdict::torch_watchdog_ends(views);
    const verdict::CausalOrder causal = verdict::order_causally(views, jr.now_mono_ns);
    AnalysisOptions copt = opt;
    uint64_t judged_at = jr.now_mono_ns;
    const std::string job_name = "job " + (jr.job_id.empty() ? std::string("(no job id)") : jr.job_id);
    // Whether it hung before it was ended: at the timeout asked for, else the shortest the ranks ran with (an
    // `analyze` after the end judges stalls at 0, which would call any job killed mid-step hung).
    // The shortest NCCLWATCH_TIMEOUT_SEC the ranks ran with, and the shortest timeout of their torch process groups.
    const double ranks_timeout_s = shortest_s(job_files, &HeaderInfo::timeout_ms);
    const double hung_timeout_s = opt.timeout_s > 0 ? opt.timeout_s : ranks_timeout_s;
    const double torch_timeout_s = shortest_s(job_files, &HeaderInfo::torch_timeout_ms);
    if ((causal.ended_together || causal.first_from_outside) &&
        verdict::hung_before(views, causal.first_ns, hung_timeout_s)) {
        // A hang that a scheduler, a launcher or a person ended (every rank at once, or node by node as torchrun
        // agents go down): the hang as it stood at the first of those signals. Its culprit never departed first.
        verdict::revive_ended_together(views);
        judged_at = causal.first_ns;
        warnings.push_back(job_name + (causal.ended_together
                                           ? ": every rank was ended at the same moment from outside while the job "
                                             "hung: judged as it stood then"
                                           : ": the job hung, then its ranks were ended from outside (a launcher's or "
                                             "a scheduler's signals): judged as it stood at the first of them"));
    } else if (causal.ended_together) {
        copt.stalls = false;
        warnings.push_back(job_name +
                           ": every rank ended at the same moment without an exit, crash or error of its own "
                           "(all killed together from outside): not a hang");
    }
    // Every communicator: a rank late to one op because its op on another ended late is not a straggler.
    const std::vector<const verdict::CommView*> job_views(views.begin(), views.end());
    for (auto& c : jr.comms) {
        check_cancel(opt);
        judge_comm(c, judged_at, copt, job_views, std::max(opt.timeout_s, hung_timeout_s));
        for (auto& v : c.verdicts)
            if (v.kind != verdict::Kind::Straggler)
                v.evidence.insert(v.evidence.end(), causal.notes.begin(), causal.notes.end());
    }
    std::vector<verdict::CommVerdicts> cv;
    for (auto& c : jr.comms) cv.push_back({&c.view, &c.verdicts});
    verdict::assign_cascade_roles(cv);
    // Stalls on communicators that wait on each other in a cycle: one DEADLOCK (verdict_deadlock.h).
    verdict::find_deadlocks(cv);
    // A stall in a job whose ranks disagree on a setting NCCL needs them to agree on (verdict_settings.h): read from
    // the environments only when something stalled.
    if (copt.stalls && std::any_of(jr.comms.begin(), jr.comms.end(),
                                   [](const CommResult& c) { return verdict::stall_of(c.verdicts) != nullptr; })) {
        std::vector<audit::ProcessFacts> facts;
        facts.reserve(job_files.size());
        for (const auto* f : job_files) facts.push_back(audit::ProcessFacts{&f->header, &f->comms});
        verdict::lead_with_settings(audit::must_agree_differences(facts), cv);
    }
    // torch's watchdog ended ranks: FAILED leads, naming what it timed out.
    if (!cv.empty()) verdict::lead_with_torch_watchdog(cv, torch_ends, ranks_timeout_s, torch_timeout_s);
    // Suspicions take part in the cascade pass as the stalls they may become, beside the stalls there are (copies:
    // their verdicts have their roles already).
    if (std::any_of(jr.comms.begin(), jr.comms.end(), [](const CommResult& c) { return !c.suspected.empty(); })) {
        std::vector<std::vector<verdict::Verdict>> copies(jr.comms.size());
        cv.clear();
        for (size_t i = 0; i < jr.comms.size(); ++i) {
            CommResult& c = jr.comms[i];
            copies[i] = c.verdicts;
            cv.push_back({&c.view, c.suspected.empty() ? &copies[i] : &c.suspected});
        }
        verdict::assign_cascade_roles(cv);
    }
    const auto by_importance = [](const verdict::Verdict& x, const verdict::Verdict& y) {
        return std::pair(x.consequence, verdict_importance(x.kind)) <
               std::pair(y.consequence, verdict_importance(y.kind));
    };
    for (auto& c : jr.comms) {
        std::stable_sort(c.verdicts.begin(), c.verdicts.end(), by_importance);
        std::stable_sort(c.suspected.begin(), c.suspected.end(), by_importance);
    }
    if (!opt.audit) return;
    check_cancel(opt);
    std::vector<audit::ProcessFacts> facts;
    facts.reserve(job_files.size());
    for (const auto* f : job_files) facts.push_back(audit::ProcessFacts{&f->header, &f->comms});
    jr.audit = audit::audit_job(facts);
}

}  // namespace

namespace {

// What an analysis that could not even start says (its file list could not be built).
Analysis out_of_memory() noexcept {
    Analysis a;
    try {
        a.warnings.push_back("analysis failed: out of memory");
    } catch (...) {
    }
    return a;
}

}  // namespace

Analysis analyze(const std::vector<FileSnapshot>& files, const AnalysisOptions& opt) noexcept {
    try {
        std::vector<const FileSnapshot*> ptrs;
        ptrs.reserve(files.size());
        for (const auto& f : files) ptrs.push_back(&f);
        return analyze(ptrs, opt);
    } catch (...) {
        return out_of_memory();
    }
}

Analysis analyze(const std::vector<const FileSnapshot*>& files, const AnalysisOptions& opt) noexcept {
    Analysis a;
    try {
        std::map<std::string, JobFiles> by_job;
        a.files.reserve(files.size());
        for (const FileSnapshot* fp : files) {
            const FileSnapshot& f = *fp;
            FileSummary sum;
            sum.path = f.path;
            sum.ok = f.ok;
            sum.error = f.error;
            if (f.ok) {
                sum.job_id = f.header.job_id;
                sum.host = f.header.host;
                sum.pid = f.header.pid;
                sum.global_rank = f.header.global_rank;
                sum.timeout_ms = f.header.timeout_ms;
            }
            a.files.push_back(std::move(sum));
            if (!f.ok) {
                a.warnings.push_back(f.path + ": " + f.error);
                continue;
            }
            ++a.files_read;
            for (const auto& w : f.warnings) a.warnings.push_back(f.path + ": " + w);
            by_job[f.header.job_id].push_back(&f);
        }
        for (const auto& [job_id, job_files] : by_job) {
            JobResult jr = build_job(job_id, job_files, opt, a.warnings);
            judge_job(jr, job_files, opt, a.warnings);
            a.jobs.push_back(std::move(jr));
        }
    } catch (const Cancelled&) {
        a.cancelled = true;
        try {
            a.warnings.push_back("analysis interrupted (the caller is stopping): incomplete");
        } catch (...) {
        }
    } catch (const std::exception& e) {
        try {
            a.warnings.push_back(std::string("analysis incomplete: ") + e.what());
        } catch (...) {
        }
    } catch (...) {
    }
    return a;
}

Analysis analyze_paths(const std::vector<std::string>& paths, const AnalysisOptions& opt) noexcept {
    try {
        // The same file named twice (a folder and a file in it) is read once.
        std::set<std::string> seen;
        std::vector<FileSnapshot> snaps;
        for (const auto& p : paths) {
            std::error_code ec;
            auto canon = std::filesystem::weakly_canonical(p, ec);
            if (!seen.insert(ec ? p : canon.string()).second) continue;
            snaps.push_back(snapshot_path(p, opt.p2p));
        }
        return analyze(snaps, opt);
    } catch (...) {
        return out_of_memory();
    }
}

}  // namespace ncw

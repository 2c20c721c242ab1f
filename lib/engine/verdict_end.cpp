// FAILED: the ranks torch's NCCL watchdog ended, and what it timed out (verdict_end.h).
#include "engine/verdict_end.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/causal.h"
#include "engine/verdict_ranks.h"
#include "engine/verdict_settings.h"
#include "engine/verdict_text.h"

namespace ncw::verdict {

std::vector<WatchdogEnd> torch_watchdog_ends(const std::vector<CommView*>& views) {
    std::vector<WatchdogEnd> out;
    for (const CommView* v : views)
        for (const auto& r : v->ranks)
            if (ended_by_torch_watchdog(r)) {
                const bool aborted = torch_watchdog_end_ns(r) != r.end_mono_ns;
                out.push_back({v->comm_id, r.comm_rank, torch_watchdog_end_ns(r), aborted ? 0 : r.end_status,
                               aborted ? r.abort_thread : r.end_thread});
            }
    return out;
}

namespace {

// The op that had waited longest on the ended ranks of one communicator when they were ended: for each such rank,
// each op in its signature window, the wait from its issue to the last rank's issue of the same op (which released
// it), or to the rank's end where some rank never issued it.
struct LongestWait {
    double wait_s = 0;
    OpSig op;
    std::vector<int> late;  // the comm ranks whose issue released it (or that never issued it, or are out of sight)
    bool completed = false;
};

// Waits within this share of the longest count as as long (ops queued behind the same late rank end together).
constexpr double kSameWait = 0.95;

LongestWait longest_wait(const CommView& view, const std::vector<WatchdogEnd>& ends) {
    LongestWait best;
    std::vector<LongestWait> all;
    for (const auto& e : ends) {
        if (e.comm_id != view.comm_id) continue;
        const RankCommState* r = state_of_rank(view, e.comm_rank);
        if (!r) continue;
        for (const OpSig& s : r->recent) {
            if (!s.t_issue_ns || s.t_issue_ns > e.at_ns) continue;
            uint64_t last = s.t_issue_ns;
            std::vector<int> last_issuer, never_issued;  // never issued it: waited on until the end
            for (const auto& q : view.ranks) {
                const OpSig* qs = find_sig(q, s.seq);
                if (q.issued < s.seq)
                    never_issued.push_back(q.comm_rank);
                else if (qs && qs->t_issue_ns > last)  // out of its window: not known
                    last = qs->t_issue_ns, last_issuer = {q.comm_rank};
            }
            // Still open on it at its end with every rank in sight past it: a rank out of sight held it (one node's
            // files), waited on until the end as well.
            const bool open = r->completed < s.seq;
            if (open && never_issued.empty()) never_issued = missing_ranks(view);
            const bool never = !never_issued.empty();
            const std::vector<int>& late = never ? never_issued : last_issuer;
            const uint64_t until = never ? e.at_ns : std::min(last, e.at_ns);
            const double wait = ns_to_s(until - s.t_issue_ns);
            if (late.empty()) continue;
            LongestWait w{wait, s, late, !never && r->completed >= s.seq};
            std::sort(w.late.begin(), w.late.end());
            all.push_back(std::move(w));
        }
    }
    // Torch's watchdog checks its work in issue order: of the ops that waited about as long as the longest (queued
    // one behind another on the same late rank), the oldest is the one it timed out ("SeqNum=" in its message).
    double longest = 0;
    for (const auto& w : all) longest = std::max(longest, w.wait_s);
    for (auto& w : all)
        if (w.wait_s > 0 && w.wait_s >= longest * kSameWait && (!best.op.seq || w.op.seq < best.op.seq))
            best = std::move(w);
    return best;
}

// Shorter waits are not named as what torch timed out (its timeout is seconds at the least in practice).
constexpr double kNamedWaitS = 1.0;

// "SIGABRT raised", or "ncclCommAbort called" (0: the watchdog aborted the communicators first).
std::string how_words(int sig) {
    if (!sig) return "ncclCommAbort called";
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? fmt::format("SIG{} raised", abbrev) : fmt::format("signal {} raised", sig);
}

}  // namespace

void lead_with_torch_watchdog(std::vector<CommVerdicts>& cv, const std::vector<WatchdogEnd>& ends,
                              double ranks_timeout_s, double torch_timeout_s) {
    if (ends.empty()) return;
    // What the watchdog timed out: the op that had waited longest on the ranks it ended (torch times every op from its
    // issue), and the stall judged there, where one was.
    CommVerdicts* where = nullptr;
    LongestWait best;
    for (auto& c : cv) {
        LongestWait w = longest_wait(*c.view, ends);
        if (w.wait_s > best.wait_s && w.wait_s >= kNamedWaitS) best = std::move(w), where = &c;
    }
    const Verdict* stall = where ? stall_of(*where->verdicts) : nullptr;
    if (stall && (stall->consequence || stall->seq != best.op.seq)) stall = nullptr;
    Verdict v;
    v.kind = Kind::Failed;
    v.torch_timeout_s = torch_timeout_s;
    std::string cause;
    if (where) {
        v.comm_id = where->view->comm_id;
        v.seq = best.op.seq;
        v.op = best.op;
        v.culprits = stall ? stall->culprits : best.late;
        v.stalled_for_s = best.wait_s;
        v.missing = stall ? stall->missing : missing_ranks(*where->view);
        // Out of sight here (no rank file): named by the comm ranks in `missing`, not as culprits.
        v.culprits.erase(std::remove_if(v.culprits.begin(), v.culprits.end(),
                                        [&](int cr) { return !state_of_rank(*where->view, cr); }),
                         v.culprits.end());
        cause = stall ? fmt::format("the stall they were in: {}: {}", kind_name(stall->kind), stall->summary)
                      : fmt::format("the longest wait on them: {} waited {} for {}{}", sig_short(best.op, true),
                                    secs(best.wait_s), ranks_word(best.late),
                                    best.completed ? ", which issued it then: it completed, after torch's timeout had "
                                                     "passed"
                                                   : "");
    }
    if (!where) where = &cv.front();
    if (!v.comm_id) v.comm_id = where->view->comm_id;
    for (const auto& e : ends)
        if (e.comm_id == v.comm_id) v.waiting.push_back(e.comm_rank);
    if (v.waiting.empty())  // ended ranks of other communicators only: named there
        for (const auto& e : ends) v.waiting.push_back(e.comm_rank);
    std::sort(v.waiting.begin(), v.waiting.end());
    v.waiting.erase(std::unique(v.waiting.begin(), v.waiting.end()), v.waiting.end());
    // How: the first of its ends (the ones after follow from it).
    const WatchdogEnd& first =
        *std::min_element(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.at_ns < b.at_ns; });
    v.summary =
        fmt::format("torch's NCCL watchdog ended {} ({} in its thread {}); {}", ranks_word(v.waiting),
                    how_words(first.signal), first.thread,
                    cause.empty() ? "no op of theirs had waited a second: an error torch's own log names (it logs the "
                                    "reason before it ends the process)"
                                  : cause);
    for (const auto& e : ends) {
        const RankCommState* r = e.comm_id == v.comm_id ? state_of_rank(*where->view, e.comm_rank) : nullptr;
        if (!r) continue;
        const OpSig* issued = v.op.seq ? find_sig(*r, v.op.seq) : nullptr;
        v.evidence.push_back(
            fmt::format("{}: ended by torch's NCCL watchdog ({} in {}){}", rank_id(*r), how_words(e.signal), e.thread,
                        issued && issued->t_issue_ns
                            ? fmt::format(" {} after it issued {}", secs(ns_to_s(e.at_ns - issued->t_issue_ns)),
                                          sig_short(v.op, true))
                            : std::string()));
    }
    v.evidence.push_back(
        "torch's watchdog times each collective from its issue; past the process group's timeout it logs \"Watchdog "
        "caught collective operation timeout ... Timeout(ms)=\" and ends the process "
        "(TORCH_NCCL_ASYNC_ERROR_HANDLING=3, "
        "the default: SIGABRT once its Flight Recorder dump is done), even where the late rank arrives after");
    // The two timeouts side by side: ncclwatch's report comes before torch's end only where its timeout is shorter.
    if (torch_timeout_s > 0)
        v.evidence.push_back(fmt::format(
            "torch's process-group timeout: {:g} s (the shortest timeout= of init_process_group and new_group, or "
            "torch's default, as ncclwatch's launcher hook read it)",
            torch_timeout_s));
    if (v.seq && ranks_timeout_s > 0)
        v.evidence.push_back(
            ranks_timeout_s < v.stalled_for_s
                ? fmt::format("NCCLWATCH_TIMEOUT_SEC={:g} is shorter than the {} wait: ncclwatch judges such a stall "
                              "before torch's timeout ends the job",
                              ranks_timeout_s, secs(v.stalled_for_s))
                : fmt::format("NCCLWATCH_TIMEOUT_SEC={:g} is longer than the {} wait torch's timeout ended: ncclwatch "
                              "could not report the stall before torch ended the job; set it below torch's timeout",
                              ranks_timeout_s, secs(v.stalled_for_s)));
    if (v.seq)
        v.evidence.push_back(
            "the timeout is `timeout=` of init_process_group (10 min by default for NCCL) and of new_group: raise it "
            "above the longest time one rank spends away from the collectives (validation, checkpointing, a first "
            "step's compile), or have every rank take part in that phase; keep NCCLWATCH_TIMEOUT_SEC below it, so "
            "that ncclwatch reports before torch ends the job");
    // What the job did after the watchdog caught the timeout (torch holds its work queue while it dumps, so ranks
    // stop at different ops) follows from it; the stall it timed out is its cause and keeps its words.
    const std::string lead = v.summary;
    for (auto& c : cv)
        for (auto& x : *c.verdicts)
            if (&x != stall && x.kind != Kind::Straggler && !x.consequence) {
                x.consequence = true;
                x.consequence_of = lead;
            }
    where->verdicts->insert(where->verdicts->begin(), std::move(v));
}

}  // namespace ncw::verdict

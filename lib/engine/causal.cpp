// Causal order across a job's processes: see causal.h.
#include "engine/causal.h"

#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr int32_t kNcclRemoteError = 6;  // a peer's connection went away

// When the rank's process departed, on the views' clock; kNever while it runs (or when nothing says when).
uint64_t departed_at(const RankCommState& r, uint64_t now_ns) {
    // An uncaught exception in the main thread is where it left, whenever the exit that followed was recorded.
    if (r.last_words_main && r.last_words_mono_ns) return r.last_words_mono_ns;
    if (r.end_kind != uint32_t(disk::EndKind::None) && r.end_mono_ns) return r.end_mono_ns;
    // A clean exit whose code is not known but whose time is (the live collector: its Bye's arrival).
    if (r.exited_clean && r.end_mono_ns) return r.end_mono_ns;
    if (r.alive || r.exited_clean) return kNever;  // a clean exit before 1.5 carries no time
    const uint64_t age = uint64_t(std::max(0.0, r.heartbeat_age_s) * 1e9);
    return now_ns > age ? now_ns - age : kNever;
}

// Whether the rank tore the communicator down itself (its connections to the peers closed then).
bool torn_down(const RankCommState& r) {
    return r.comm_state == uint32_t(disk::CommState::Destroyed) ||
           r.comm_state == uint32_t(disk::CommState::Finalized) || r.comm_state == uint32_t(disk::CommState::Aborted);
}

// When a collective of this rank failed and stayed failed (nothing completed after it), kNever if none did.
uint64_t failed_at(const RankCommState& r) {
    if (!r.ops_failed || !r.t_first_failed_ns || !r.first_failed_seq || r.completed >= r.first_failed_seq)
        return kNever;
    return r.t_first_failed_ns;
}

std::string signal_words(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? fmt::format("SIG{} (signal {})", abbrev, sig) : fmt::format("signal {}", sig);
}

// The rank's counts as they stood at `t`: the ops it issued after `t` (their signatures say when) not issued yet.
void rewind_to(RankCommState& r, uint64_t t) {
    uint64_t issued = r.issued;
    while (issued > 0) {
        const OpSig* s = find_sig(r, issued);
        if (!s || s->t_issue_ns <= t) break;
        --issued;
    }
    if (issued == r.issued) return;
    r.issued = issued;
    r.completed = std::min(r.completed, issued);  // what it issued later it completed later
    r.returned = std::min(r.returned, issued);
    r.reached = std::min(r.reached, issued);
    const OpSig* s = find_sig(r, issued);
    r.t_last_issue_ns = s ? s->t_issue_ns : std::min(r.t_last_issue_ns, t);
    if (r.stall_since_ns > t) r.stall_since_ns = 0;
}

// A blocking communicator's ncclCommDestroy or ncclCommFinalize returns only once NCCL has completed its work (it
// flushes the uncompleted operations). The shim records the teardown as the call begins; a process that then exited
// with code 0 got past it, so every op it issued there completed, whatever GPU events the exit cut off (NCCL's
// profiler may report no end for the last kernel before the teardown). Not after an abort, a failed op or an
// asynchronous error (the flush may have given up), nor after any other end (a guard thread's _exit while the
// teardown hung, a signal).
void credit_returned_teardowns(const std::vector<CommView*>& views) {
    for (CommView* v : views)
        for (auto& r : v->ranks) {
            const bool flushed = r.comm_state == uint32_t(disk::CommState::Destroyed) ||
                                 r.comm_state == uint32_t(disk::CommState::Finalized);
            if (!flushed || r.blocking == 0 || !ended_clean(r) || r.ops_failed || r.async_error) continue;
            r.reached = r.completed = r.returned = r.issued;
            r.unreached = r.uncompleted = 0;
            for (auto& e : r.p2p) {
                e.sends_reached = e.sends_completed = e.sends_issued;
                e.recvs_reached = e.recvs_completed = e.recvs_issued;
                e.t_oldest_send_pending_ns = e.t_oldest_recv_pending_ns = 0;
            }
        }
}

}  // namespace

namespace {

std::string how_it_ended(const RankCommState& r) {
    switch (disk::EndKind(r.end_kind)) {
        case disk::EndKind::Exit:
            if (exit_on_signal(r))
                return fmt::format("exited (exit code {}) in answer to {}, which its own handler took {} before",
                                   r.end_status, signal_words(r.absorbed_signal),
                                   secs(double(r.end_mono_ns - r.absorbed_mono_ns) / 1e9));
            if (r.absorbed_mono_ns && r.absorbed_signal)
                return fmt::format("exited (exit code {}); its own handler had taken {} and it went on", r.end_status,
                                   signal_words(r.absorbed_signal));
            return fmt::format("exited (exit code {})", r.end_status);
        case disk::EndKind::FatalSignal:
            if (ended_by_torch_watchdog(r) && !r.end_thread.empty())
                return fmt::format("was ended by torch's NCCL watchdog ({} raised in its thread {})",
                                   signal_words(r.end_status), r.end_thread);
            return fmt::format("crashed with {}", signal_words(r.end_status));
        case disk::EndKind::Terminated: return fmt::format("was terminated by {}", signal_words(r.end_status));
        case disk::EndKind::None: break;
    }
    if (r.last_words_main && r.last_words_mono_ns) return "is exiting on an uncaught exception";
    if (r.exited_clean) return "exited cleanly (exit handlers ran)";
    return fmt::format("is gone (killed?; heartbeat {} old)", secs(r.heartbeat_age_s));
}

}  // namespace

namespace {

// A thread of torch's NCCL watchdog: pt_nccl_watchdg, pt_nccl_heartbt.
bool torch_thread(const std::string& name) { return name.rfind("pt_nccl_", 0) == 0; }
bool aborted_by_torch(const RankCommState& r) { return r.abort_mono_ns && torch_thread(r.abort_thread); }

}  // namespace

bool ended_by_torch_watchdog(const RankCommState& r) {
    // An abort by torch's thread counts where it came first: a rank its launcher had already told to end (a SIGTERM
    // after a peer's death) whose watchdog then aborted was ended by the launcher.
    return (r.end_kind == uint32_t(disk::EndKind::FatalSignal) && r.end_status == SIGABRT &&
            torch_thread(r.end_thread)) ||
           (aborted_by_torch(r) && r.end_kind != uint32_t(disk::EndKind::None) &&
            (!r.end_mono_ns || r.abort_mono_ns <= r.end_mono_ns));
}

uint64_t torch_watchdog_end_ns(const RankCommState& r) {
    return aborted_by_torch(r) && (!r.end_mono_ns || r.abort_mono_ns < r.end_mono_ns) ? r.abort_mono_ns : r.end_mono_ns;
}

bool exit_on_signal(const RankCommState& r) {
    return r.end_kind == uint32_t(disk::EndKind::Exit) && r.end_status != 0 && r.absorbed_signal &&
           r.absorbed_mono_ns && r.end_mono_ns >= r.absorbed_mono_ns &&
           r.end_mono_ns - r.absorbed_mono_ns < disk::kAbsorbedWindowNs;
}

bool ended_by_term_signal(const RankCommState& r) {
    return r.end_kind == uint32_t(disk::EndKind::Terminated) || exit_on_signal(r);
}

bool ended_clean(const RankCommState& r) {
    return (r.end_kind == uint32_t(disk::EndKind::Exit) && r.end_status == 0) ||
           (r.exited_clean && r.end_kind == uint32_t(disk::EndKind::None));
}

std::string end_words(const RankCommState& r) {
    // Its last words, where its launcher's hook noted them: "exited (exit code 1): torch.OutOfMemoryError: ...".
    return r.last_words.empty() ? how_it_ended(r) : how_it_ended(r) + ": " + r.last_words;
}

bool hung_before(const std::vector<CommView*>& views, uint64_t t, double timeout_s) {
    const uint64_t timeout_ns = timeout_s > 0 ? uint64_t(timeout_s * 1e9) : 0;
    for (const CommView* v : views)
        for (const auto& r : v->ranks) {
            // A stall its shim had reported by t: one that had lasted the timeout by then (stall_since_ns is when it
            // began, and a wait that began just before a kill is reported only a timeout after it).
            if (r.stall_since_ns && r.stall_since_ns < t && t - r.stall_since_ns >= timeout_ns) return true;
            // A teardown call that had not returned for the timeout (TEARDOWN_HANG).
            if (timeout_ns && r.teardown_since_ns && r.teardown_since_ns < t && t - r.teardown_since_ns >= timeout_ns)
                return true;
            const uint64_t since = std::max(r.t_last_progress_ns, r.t_last_issue_ns);
            if (timeout_ns && r.issued > r.completed && since && since < t && t - since >= timeout_ns) return true;
            // A send or receive pending that long (a pipeline's stage waiting for the one before it).
            for (const auto& e : r.p2p)
                for (const uint64_t pend : {e.sends_issued > e.sends_completed ? e.t_oldest_send_pending_ns : 0,
                                            e.recvs_issued > e.recvs_completed ? e.t_oldest_recv_pending_ns : 0})
                    if (timeout_ns && pend && pend < t && t - pend >= timeout_ns) return true;
        }
    return false;
}

void revive_ended_together(const std::vector<CommView*>& views) {
    for (CommView* v : views)
        for (auto& r : v->ranks) {
            // No rank departed before the signals from outside, so a peer lost (its socket closed) is one of them
            // going: the teardown's consequence, not part of the hang it ended.
            if (r.async_error == kNcclRemoteError) r.async_error = 0;
            r.alive = true;
            r.exited_clean = false;
            r.end_kind = uint32_t(disk::EndKind::None);
            r.heartbeat_age_s = 0;
        }
}

CausalOrder order_causally(const std::vector<CommView*>& views, uint64_t now_ns) {
    CausalOrder out;
    credit_returned_teardowns(views);
    // A process's first failed call, over all its communicators: a rank whose op failed on one communicator and
    // which then crashed (torch aborts on the error) departs from every other one as that failure's consequence,
    // not as a first departure of its own there. Taken before the views change below.
    struct Failure {
        uint64_t at = kNever;
        const RankCommState* where = nullptr;  // its failed call's record (seq, result, signature)
        bool torch = false;                    // torch's NCCL watchdog ended it (no failed call of its own)
    };
    std::map<std::pair<std::string, int64_t>, Failure> proc_failed;
    for (const CommView* v : views)
        for (const auto& r : v->ranks) {
            // torch's NCCL watchdog ending the process is its wait given up, as a call that failed: the stall it
            // timed out is the story, the end its consequence.
            if (const uint64_t t = torch_watchdog_end_ns(r); ended_by_torch_watchdog(r) && t) {
                Failure& f = proc_failed[{r.host, r.pid}];
                if (t < f.at) f = {t, &r, true};
            }
            const uint64_t t = failed_at(r);
            if (t == kNever) continue;
            // NCCL's remote error says a peer's connection went away. A peer of this communicator that tore it down
            // of its own accord (destroy, finalize or abort with no error of its own: its connections closed then)
            // and then departed is where it went away, whenever its process end was recorded (a rank out of data
            // destroys its group and exits seconds after its peers' error): the error is that departure's
            // consequence, never the first event. (A peer that aborted on an error of its own reacted: no cause.)
            if (r.first_failed_result == kNcclRemoteError || r.async_error == kNcclRemoteError) {
                const bool peer_left = std::any_of(v->ranks.begin(), v->ranks.end(), [&](const RankCommState& p) {
                    return p.pid != r.pid && torn_down(p) && failed_at(p) == kNever && p.async_error == 0 &&
                           departed_at(p, now_ns) != kNever;
                });
                if (peer_left) continue;
            }
            Failure& f = proc_failed[{r.host, r.pid}];
            if (t < f.at) f = {t, &r, false};
        }
    auto failure_of = [&](const RankCommState& r) {
        auto it = proc_failed.find({r.host, r.pid});
        return it == proc_failed.end() ? Failure{} : it->second;
    };
    auto process_failed_at = [&](const RankCommState& r) { return failure_of(r).at; };
    // The first departure or failure of the job, over every communicator (a process departs from all at once).
    uint64_t first = kNever;
    for (const CommView* v : views)
        for (const auto& r : v->ranks) first = std::min({first, departed_at(r, now_ns), process_failed_at(r)});
    if (first == kNever) return out;
    out.any = true;
    out.first_ns = first;
    const uint64_t upto = first + kSimultaneousNs;
    // A first departure is the cause whatever the others did after it (they went on into the op it never joined). A
    // first failure is waiting ranks giving up: an op another rank issued only after that came too late to count.
    bool first_is_failure = false;
    for (const CommView* v : views)
        for (const auto& r : v->ranks)
            if (process_failed_at(r) <= upto && process_failed_at(r) <= departed_at(r, now_ns)) first_is_failure = true;
    // A SIGTERM / SIGINT within the first moment, beside a departure that was not one (an exit, a crash, a kill with
    // no end recorded): the launcher tearing the node down after that rank went (torchrun within 0.3 s), a
    // consequence; only when every first departure was such a signal is it the first moment itself.
    // Likewise beside a failure: torch's watchdog ending ranks, and the launcher tearing down the rest.
    bool other_than_term_first = first_is_failure;
    for (const CommView* v : views)
        for (const auto& r : v->ranks)
            if (departed_at(r, now_ns) <= upto && departed_at(r, now_ns) < process_failed_at(r) &&
                !ended_by_term_signal(r))
                other_than_term_first = true;
    for (const CommView* v : views)
        for (const auto& r : v->ranks)
            if (departed_at(r, now_ns) <= upto && departed_at(r, now_ns) < process_failed_at(r) &&
                !(other_than_term_first && ended_by_term_signal(r)))
                first_is_failure = false;

    // Who was first: departed (the culprits, DEAD) or failed (waiting ranks whose call gave up: the stall is the
    // story, their error its end). Noted once per process.
    std::vector<int64_t> noted;
    bool all_together = true, from_outside = true, any_first_dep = false;
    for (CommView* v : views) {
        for (auto& r : v->ranks) {
            const uint64_t dep = departed_at(r, now_ns), fail = process_failed_at(r);
            // A rank's own first event: a call that failed before its process departed is where it stood.
            const bool fail_first = fail <= dep;
            const bool in_first = std::min(dep, fail) <= upto;
            const bool launcher_term = other_than_term_first && ended_by_term_signal(r);
            const bool first_dep = in_first && !fail_first && !launcher_term;
            all_together = all_together && first_dep;
            if (first_dep) {
                any_first_dep = true;
                // A rank on its way out after an uncaught exception of its own left by itself.
                const bool own_exception = r.last_words_main && r.last_words_mono_ns;
                from_outside = from_outside && !own_exception &&
                               (r.end_kind == uint32_t(disk::EndKind::None) || ended_by_term_signal(r));
                continue;
            }
            // A failure just after a first departure (an asynchronous error within a poll of the peer's death:
            // NCCL's transport saw its connection drop) is that departure's consequence, within the window or not.
            if (in_first && (first_is_failure || fail <= first)) {
                // Its call gave up waiting (a timeout inside NCCL, an abort): it was alive and waiting at the first
                // moment; its own exit afterwards is the error's consequence.
                r.alive = true;
                r.exited_clean = false;
                r.end_kind = uint32_t(disk::EndKind::None);
                continue;
            }
            // Later: a consequence. Alive and where it was at the first moment.
            const bool seen = std::find(noted.begin(), noted.end(), r.pid) != noted.end();
            std::string what;
            if (dep != kNever) what = end_words(r);
            if (const Failure fl = failure_of(r); fl.torch && fail <= dep)
                what = end_words(r);
            else if (const RankCommState* f = fl.where; f && fail <= dep)
                what =
                    fmt::format("its {} failed ({} {}){}",
                                find_sig(*f, f->first_failed_seq) ? sig_short(*find_sig(*f, f->first_failed_seq), true)
                                                                  : fmt::format("#{}", f->first_failed_seq),
                                nccl_result_name(f->first_failed_result), f->first_failed_result,
                                what.empty() ? "" : ", then it " + what);
            if (!what.empty() && !seen) {
                noted.push_back(r.pid);
                out.notes.push_back(fmt::format("{}: {} {} after the first departure or failure: a consequence",
                                                rank_id(r), what, secs(ns_to_s(std::min(dep, fail) - first))));
            }
            r.alive = true;
            r.exited_clean = false;
            r.end_kind = uint32_t(disk::EndKind::None);
            // Its error came later too: a failed op, or an asynchronous error seen while no op was outstanding
            // (first_failed_seq 0: no failed op, but the time says when).
            if ((fail != kNever || (r.t_first_failed_ns && r.t_first_failed_ns >= first)) &&
                is_async_error(r.async_error))
                r.async_error = 0;
            if (first_is_failure) rewind_to(r, first);
        }
    }
    out.ended_together = all_together && from_outside;
    out.first_from_outside = any_first_dep && from_outside && !first_is_failure;
    return out;
}

}  // namespace ncw::verdict

#include "shim/watch/watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine/job_view.h"
#include "engine/verdict_ranks.h"
#include "read/rank_file.h"
#include "report/headline.h"
#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/complete/completion_tracker.h"
#include "shim/complete/profiler_plugin.h"
#include "shim/record/own_mapping.h"
#include "shim/watch/comm_watch.h"
#include "shim/watch/dump_writer.h"
#include "shim/watch/process_end.h"
#include "shim/watch/py_stacks.h"
#include "shim/watch/sibling_files.h"
#include "shim/watch/stall_action.h"
#include "shim/watch/stall_decision.h"

namespace ncw {
namespace {

std::atomic<bool> g_sigusr1{false};
std::atomic<bool> g_started{false};

void on_sigusr1(int) { g_sigusr1.store(true, std::memory_order_relaxed); }

void install_sigusr1() {
    // Only where nobody else handles SIGUSR1: its default action kills the process, a handler of the host program's
    // is its own business.
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
}

// The dumps a stall's reporter asked this host's other ranks for (check_node_dumps).
struct NodeDumps {
    struct Asked {
        std::string file;
        uint64_t before = 0;  // its dumps_written before the request
        int global_rank = -1;
    };
    std::vector<Asked> asked;
    uint64_t deadline_ns = 0;
};

class Watchdog {
public:
    explicit Watchdog(Runtime& rt) : rt_(rt), dumps_(rt), siblings_(rt.id.host) {}

    void run() {
        const uint64_t poll_ns = uint64_t(rt_.cfg.poll_ms) * 1000000ull;
        uint64_t last_mismatch_check = 0, last_straggler_check = 0, last_p2p_straggler_check = 0;
        // From 0, not from the counter's value now: the file is new, so any request already counted (the live
        // collector's, received by the digest thread before this thread first ran) is one to honour.
        uint64_t seen_requests = 0;
        for (;;) {
            std::unique_lock<std::timed_mutex> lock(mu_);
            PassScope pass(&rt_.watchdog_pass);  // holds comm slot pointers (comm_slots.h)
            refresh_tsc_anchor();
            uint64_t now = now_mono_ns();
            rt_.file.hdr->heartbeat_mono_ns.store(now, std::memory_order_relaxed);

            // One failed poll (out of memory while reading siblings, say) is logged and the next one runs.
            try {
                if (final_verdict_wanted()) final_verdict();
                if (const int sig = end_signal_absorbed(now))
                    log().warn(
                        "{} was taken by the program's own handler and the process went on: not an end, "
                        "the job is judged on what follows",
                        sig == SIGINT ? "SIGINT" : "SIGTERM");
                if (const uint64_t cut = own_mapping_cut_at())
                    NCW_LOG_ONCE(warn,
                                 "this rank's file {} was cut short by another process: what it held from byte {} of "
                                 "{} on is lost, and recording goes on in memory there (a crash now leaves less "
                                 "evidence; said once)",
                                 rt_.file.path, cut, rt_.file.size);
                publish_profiler();  // what NCCL's profiler events proved, into the progress blocks read below
                uint64_t req = rt_.file.hdr->dump_request.load(std::memory_order_relaxed);
                if (req != seen_requests) {
                    seen_requests = req;
                    dumps_.write_dump("requested by a sibling rank", disk::PyStacksReason::DumpRequest);
                }
                if (g_sigusr1.exchange(false)) dumps_.write_dump("SIGUSR1", disk::PyStacksReason::Sigusr1, true, true);

                check_stalls(now);
                check_node_dumps(now);
                check_collector_verdict();
                // Mismatches every second; GPU stragglers twice a second, so that one is named within 50 steps of
                // 25 ms (16 to judge, then at most half a second).
                const bool mismatches = rt_.cfg.mismatch_check && now - last_mismatch_check >= 1000000000ull;
                const bool stragglers = now - last_straggler_check >= 500000000ull && own_profiler_comm();
                if (mismatches) last_mismatch_check = now;
                if (stragglers) last_straggler_check = now;
                if (mismatches || stragglers) check_continuous(mismatches, stragglers);
                // A pipeline's slow stage, from its sends' and receives' GPU times: the siblings' rings are read
                // whole for them, so every 2 s, and only where this process times sends or receives.
                if (now - last_p2p_straggler_check >= 2000000000ull && own_profiler_comm(true)) {
                    last_p2p_straggler_check = now;
                    check_continuous(false, true, true);
                }
            } catch (const std::exception& e) {
                NCW_LOG_ONCE(error, "a watchdog poll failed: {}", e.what());
            }
            if (final_verdict_wanted()) final_verdict_done();  // a poll that failed: the handler waits no longer
            pass.leave();
            lock.unlock();
            wait_for_wake(poll_ns);  // a SIGTERM / SIGINT wakes it for the final verdict (process_end.h)
        }
    }

    // At exit, on the exiting thread: a stall that ended since the last poll is recorded as recovered (the last
    // poll may be up to a poll period old), then the dump if asked. Waits briefly for the watchdog's current poll,
    // never indefinitely.
    void on_exit() {
        std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
        if (!lock.try_lock_for(std::chrono::milliseconds(500))) return;
        PassScope pass(&rt_.watchdog_pass);  // holds comm slot pointers (comm_slots.h)
        publish_profiler();
        recover_finished(now_mono_ns(), false);
        // A mismatch NCCL completed since the last check (the job ended within a second of it): said now, once per
        // node, and in the report file however the job ends.
        if (rt_.cfg.mismatch_check) {
            try {
                check_continuous(true, false, false, true);
            } catch (const std::exception& e) {
                NCW_LOG_ONCE(error, "the mismatch check at exit failed: {}", e.what());
            }
        }
        if (rt_.cfg.dump_at_exit) dumps_.write_dump("process exit", disk::PyStacksReason::Exit);
    }

private:
    // SIGTERM / SIGINT (process_end.h): this process is ending, its end recorded. The verdict over the siblings'
    // files at timeout 0, with the first departure as its cause (engine/causal.h); what stands is a stall already
    // reported, or a rank gone before this one by its own exit, crash or a kill (not by the same teardown).
    void final_verdict() {
        const int sig = final_verdict_signal();
        const char* why = sig == SIGINT ? "SIGINT" : "SIGTERM";
        // This process's last Python stacks first, so that the verdict and the dump below name its frame.
        py_stacks_capture(rt_, disk::PyStacksReason::FinalVerdict);
        Analysis a = analyze_now(0.0, true, true, true);
        const JobResult* j = find_job(a, rt_.id.job_id);
        std::vector<const CommResult*> standing;
        for (size_t i = 0; j && i < j->comms.size(); ++i) {
            const CommResult& c = j->comms[i];
            auto w = watch_.find(c.comm_id);
            const bool reported = w != watch_.end() && w->second.clock.reported();
            bool departed = false;
            for (const verdict::Verdict& v : c.verdicts) {
                if (v.kind == verdict::Kind::Failed) departed = true;  // torch's watchdog ended ranks: the job's end
                if (v.kind == verdict::Kind::Dead)
                    for (int cr : v.culprits)
                        for (const auto& r : c.view.ranks)
                            if (r.comm_rank == cr && r.end_kind != uint32_t(disk::EndKind::Terminated)) departed = true;
            }
            if (reported || departed) standing.push_back(&c);
        }
        // The job's lead first (report/headline.h: an initiating stall, the first departure's DEAD), as one report
        // per event leads with it; only where it stands (at timeout 0 any op in flight reads as a stall).
        const Analysis::VerdictRef lead = report::lead_verdict(a);
        if (auto it = std::find(standing.begin(), standing.end(), lead.comm); lead.job == j && it != standing.end())
            std::rotate(standing.begin(), it, it + 1);
        // The job's verdict, where one came from the live collector and this node cannot judge alone: nothing
        // stands here, or the lead's communicator has ranks on other nodes. (Not waited for: the process is ending.)
        std::string job_verdict;
        uint64_t at = 0;
        if (!rt_.cfg.collector.empty() && (standing.empty() || !standing.front()->missing.empty()))
            rt_.collector_verdict.get(job_verdict, at);
        dumps_.report_final(why, j, standing, job_verdict);
        dumps_.write_dump(why, disk::PyStacksReason::FinalVerdict, false);
        final_verdict_done();
    }

    // The files of this job's folder, as the other ranks on this node left them (sibling_files.h).
    std::vector<FileSnapshot> sibling_snapshots(bool with_p2p, bool with_spans = false) {
        return siblings_.read(rt_.file.file_backed ? rt_.file.job_dir : std::string(), with_p2p, with_spans);
    }

    // p2p: read the siblings' rings for send/recv counts; only when a stall is being reported (rare), since it
    // copies every record. stragglers: with the siblings' GPU times read (check_continuous reports the GPU way's
    // verdicts only).
    Analysis analyze_now(double timeout_s, bool stalls, bool mismatches, bool p2p = false, bool stragglers = false) {
        AnalysisOptions opt;
        opt.live = true;
        opt.timeout_s = timeout_s;
        opt.stalls = stalls;
        opt.mismatches = mismatches;
        opt.p2p = p2p;
        opt.stragglers = stragglers;
        opt.stale_after_s = std::max(5.0, 3 * rt_.cfg.poll_ms / 1000.0);
        return analyze(sibling_snapshots(p2p, stragglers), opt);
    }

    static const JobResult* find_job(const Analysis& a, const std::string& job) {
        for (const JobResult& j : a.jobs)
            if (j.job_id == job) return &j;
        return nullptr;
    }

    static const CommResult* find_comm(const JobResult* j, uint64_t comm_id) {
        if (j)
            for (const CommResult& c : j->comms)
                if (c.comm_id == comm_id) return &c;
        return nullptr;
    }

    // The communicators alive now, each runtime held (CommRuntime::holds) until this is gone: found in a short walk of
    // the registry (Runtime::watchdog_reads), so that a destroyed one's reuse waits for that walk, never for the
    // analyses of this poll (comm_pool.h).
    struct LiveRuntimes {
        std::vector<CommRuntime*> crs;
        explicit LiveRuntimes(Runtime& rt) {
            PassScope walk(&rt.watchdog_reads);
            rt.comms.for_each([&](CommRuntime& cr) {
                if (cr.destroyed.load()) return;
                cr.holds.fetch_add(1);
                crs.push_back(&cr);
            });
        }
        ~LiveRuntimes() {
            for (CommRuntime* cr : crs) cr->holds.fetch_sub(1);
        }
        LiveRuntimes(const LiveRuntimes&) = delete;
        LiveRuntimes& operator=(const LiveRuntimes&) = delete;
    };

    void check_stalls(uint64_t now) {
        const StallLimits lim = limits();
        const LiveRuntimes live(rt_);
        for (CommRuntime* c : live.crs) {
            CommRuntime& cr = *c;
            disk::CommSlot* s = cr.slot;
            if (!s || cr.destroyed.load()) continue;
            CommWatch& w = watch_[cr.comm_id];
            w.watch(&cr);
            const ProgressFacts f = read_progress(*s, cr.failed_ops.load());
            const StallDecision d = w.clock.poll(f, now, lim);
            if (d.p99_changed) s->completion_gap_p99_ns.store(w.clock.p99_ns(), std::memory_order_relaxed);
            switch (d.step) {
                case StallStep::Recovered: recovered(cr, d); break;
                case StallStep::Stalled: stalled(cr, w, d, now); break;
                case StallStep::AskSuspect: maybe_suspect(cr, w, d, now); break;
                default: break;
            }
        }
        recover_finished(now, true);
        check_init_hangs(now, lim);
        check_teardown_hang(now);
        forget_gone();
    }

    // Communicators gone since (destroyed, or their init failed): a destroyed one's runtime is let go, so that a later
    // communicator may reuse it (comm_pool.h), unless a stall or suspicion reported on it may still recover; and its
    // watch is forgotten once nothing of it is left to remember, so that the watchdog keeps one per communicator
    // alive, not one per communicator ever made (issue 45). An init still in progress keeps its own (its hang is
    // said once).
    void forget_gone() {
        std::set<uint64_t> initializing;
        const uint32_t n = std::min(rt_.file.hdr->num_comms.load(), rt_.file.hdr->max_comms);
        for (uint32_t i = 0; i < n; ++i)
            if (rt_.file.comms[i].state.load() == uint32_t(disk::CommState::Initializing))
                initializing.insert(rt_.file.comms[i].comm_id);
        for (auto it = watch_.begin(); it != watch_.end();) {
            CommWatch& w = it->second;
            if (w.cr && w.cr->destroyed.load() && !w.clock.reported()) w.watch(nullptr);
            if (!w.cr && w.said_nothing() && !initializing.count(it->first))
                it = watch_.erase(it);
            else
                ++it;
        }
    }

    // This process's teardown call (format 1.9: FileHeader::teardown_*) that has not returned for the timeout:
    // reported once per call, with the Python stacks (where it was called) and a dump.
    void check_teardown_hang(uint64_t now) {
        disk::FileHeader& h = *rt_.file.hdr;
        const uint64_t since = h.teardown_since_ns.load(std::memory_order_acquire);
        if (!since || since == teardown_reported_ || now < since || double(now - since) / 1e9 < rt_.cfg.timeout_sec)
            return;
        teardown_reported_ = since;
        const uint64_t comm_id = h.teardown_comm_id.load(std::memory_order_relaxed);
        const char* call = disk::op_name(uint8_t(h.teardown_op.load(std::memory_order_relaxed)));
        py_stacks_capture(rt_, disk::PyStacksReason::Stall);
        Analysis a = analyze_now(rt_.cfg.timeout_sec, true, true, true);
        const JobResult* j = find_job(a, rt_.id.job_id);
        const CommResult* c = find_comm(j, comm_id);
        int rank = -1;
        if (c)
            for (const auto& r : c->view.ranks)
                if (r.pid == rt_.id.pid) rank = r.comm_rank;
        dumps_.report_teardown_hang(comm_id, rank, call, j, c, double(now - since) / 1e9);
        dumps_.write_dump("teardown_hang", disk::PyStacksReason::Stall, false);
    }

    StallLimits limits() const {
        StallLimits lim;
        lim.timeout_s = rt_.cfg.timeout_sec;
        lim.suspect = rt_.cfg.suspect;
        return lim;
    }

    // A wait past this communicator's suspicion threshold (StallClock): suspected once the engine, over the ranks
    // this node sees, agrees and words the verdicts as a stall's, labelled suspected.
    void maybe_suspect(CommRuntime& cr, CommWatch& w, const StallDecision& d, uint64_t now) {
        Analysis a = analyze_now(rt_.cfg.timeout_sec, true, true, true);
        const JobResult* j = find_job(a, rt_.id.job_id);
        const CommResult* c = find_comm(j, cr.comm_id);
        if (rt_.file.file_backed && (!c || c->suspected.empty())) return w.clock.suspect_declined(now);
        w.clock.suspect_confirmed(d.since_ns, now, read_progress(*cr.slot.load(), cr.failed_ops.load()));
        dumps_.report_suspected(cr, j, c, w.clock.suspected_wait_s(), d.after_s, w.clock.p99_ns());
    }

    // Reported stalls whose communicator completed work since. Polls check live communicators themselves and pass
    // destroyed_only (PyTorch tears down right after the last step, before the next poll); the exit handler checks
    // them all.
    void recover_finished(uint64_t now, bool destroyed_only) {
        for (auto& [id, w] : watch_) {
            if (!w.clock.reported() || !w.cr || (destroyed_only && !w.cr->destroyed.load())) continue;
            const StallDecision d = w.clock.finish(read_progress(*w.cr->slot.load(), w.cr->failed_ops.load()), now);
            if (d.step == StallStep::Recovered) recovered(*w.cr, d);
        }
    }

    void check_init_hangs(uint64_t now, const StallLimits& lim) {
        uint32_t n = std::min(rt_.file.hdr->num_comms.load(), rt_.file.hdr->max_comms);
        for (uint32_t i = 0; i < n; ++i) {
            disk::CommSlot& s = rt_.file.comms[i];
            if (s.state.load() != uint32_t(disk::CommState::Initializing)) continue;
            CommWatch& w = watch_[s.comm_id];
            const StallDecision d = w.clock.poll_init(s.t_init_start_ns, now, lim);
            if (d.step == StallStep::AskSuspect) {
                // An init waiting for a rank never seen (engine/suspicion.h): suspected once the engine agrees.
                Analysis a = analyze_now(rt_.cfg.timeout_sec, true, false);
                const JobResult* j = find_job(a, rt_.id.job_id);
                const CommResult* c = find_comm(j, s.comm_id);
                if (!c || c->suspected.empty()) continue;
                w.clock.init_suspect_confirmed(s.t_init_start_ns);
                dumps_.report_init_suspected(s, *j, *c, d.waited_s);
            } else if (d.step == StallStep::InitHang) {
                // With stalls on, the engine adds its INIT_HANG verdict (who entered, who finished, the checklist).
                Analysis a = analyze_now(rt_.cfg.timeout_sec, true, false);
                const JobResult* j = find_job(a, rt_.id.job_id);
                const CommResult* c = find_comm(j, s.comm_id);
                dumps_.report_init_hang(
                    s, j, c, d.waited_s,
                    own_view_partial(c) ? collector_verdict_since(s.t_init_start_ns) : std::string());
            }
        }
    }

    void stalled(CommRuntime& cr, CommWatch& w, const StallDecision& d, uint64_t now) {
        cr.slot.load()->stall_since_ns.store(d.since_ns, std::memory_order_relaxed);
        cr.slot.load()->stall_flags.fetch_or(disk::kStallActive | disk::kStallReported);
        // The Python stacks before the report is worded, so that it names frames: ours now, and in a Python process
        // the siblings' too, which each capture at the dump request (waited for briefly, never for long).
        const bool python = py_stacks_capture(rt_, disk::PyStacksReason::Stall) == disk::PyStacksStatus::Captured;
        Analysis a = analyze_now(rt_.cfg.timeout_sec, true, true, true);
        const JobResult* j = find_job(a, rt_.id.job_id);
        const CommResult* c = find_comm(j, cr.comm_id);
        // Every rank visible, and no verdict: each is inside the op, the last to join it for less than the timeout.
        // The first rank to time out usually sees that, as the others joined moments after it; their waits pass the
        // timeout within moments too, so the report waits for them (half a second at most) rather than say "no
        // verdict" of a stall about to have one.
        for (int i = 0; i < 10 && c && c->missing.empty() && c->verdicts.empty(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            a = analyze_now(rt_.cfg.timeout_sec, true, true, true);
            j = find_job(a, rt_.id.job_id);
            c = find_comm(j, cr.comm_id);
        }
        std::set<std::string> asked;
        NodeDumps dumps;  // the siblings asked for a dump, with their count of dumps before the request
        dumps.deadline_ns = now_mono_ns() + kNodeDumpsWaitNs;
        if (python && c && ask_sibling_stacks(*c, asked, dumps)) {
            a = analyze_now(rt_.cfg.timeout_sec, true, true, true);
            j = find_job(a, rt_.id.job_id);
            c = find_comm(j, cr.comm_id);
        }
        if (c) dumps_.learn_node_stderr(*c);
        uint64_t last_poll = rt_.tracker ? rt_.tracker->last_poll_ns() : 0;
        bool tracker_stuck = rt_.tracker && last_poll < now && now - last_poll > 2000000000ull;
        // This node's files cannot name the culprit (it is on another node): the job's verdict is the live
        // collector's, which sees every node; waited for briefly, as it judges the same stall at the same timeout.
        const std::string job_verdict = own_view_partial(c) ? collector_verdict_since(d.since_ns) : std::string();
        const bool reporter = dumps_.report_stall(cr, j, c, d.waited_s, tracker_stuck, d.suspected_at_s, job_verdict);
        // Every rank of the communicator that this node can see writes its dump now, so the evidence is
        // simultaneous; the lagging rank is usually not stalled itself and would not dump on its own.
        if (c)
            for (const verdict::RankCommState& r : c->view.ranks)
                if (r.pid != rt_.id.pid && !asked.count(r.file)) {
                    const RankFile* f = siblings_.find(r.file);
                    const uint64_t before = f ? f->header().dumps_written : 0;
                    if (request_dump(r.file) && f) dumps.asked.push_back({r.file, before, r.global_rank});
                }
        // The node's dumps are said once, by the rank that printed the full report, when the siblings asked wrote
        // theirs (or the wait is over): check_node_dumps, on later polls, never waiting here.
        if (dumps_.write_dump("stall", disk::PyStacksReason::Stall, false) && reporter && rt_.file.file_backed)
            node_dumps_.push_back(std::move(dumps));
        // The ops an abort releases fail: that is not the stall recovering.
        if (rt_.cfg.action == Action::Abort) w.clock.forget_stall();
        act_on_stall(rt_, cr);
    }

    // This node's files cannot judge the communicator alone: they name no culprit, or some of its ranks are on
    // another node (their lead may be a consequence, such as a peer's lost connection, or name two ranks where the
    // job's majority would name one). The live collector, which sees every node, gives the job's verdict then.
    static bool own_view_partial(const CommResult* c) {
        return !c || c->verdicts.empty() || c->verdicts.front().kind == verdict::Kind::Unknown || !c->missing.empty();
    }

    // The live collector's verdict line, if one came since `since_ns` (the event's start) or comes within
    // kCollectorWaitNs; "" without a collector, or when none comes in time. One that came up to a timeout before the
    // start counts too: a death is judged at once, and this rank's GPU may have completed its last op after it.
    std::string collector_verdict_since(uint64_t since_ns) {
        if (rt_.cfg.collector.empty()) return {};
        const uint64_t timeout_ns = uint64_t(rt_.cfg.timeout_sec * 1e9);
        const uint64_t from = since_ns > timeout_ns ? since_ns - timeout_ns : 0;
        const uint64_t until = now_mono_ns() + kCollectorWaitNs;
        for (;;) {
            std::string line;
            uint64_t at = 0;
            if (rt_.collector_verdict.get(line, at) && at >= from) {
                said_collector_at_ = at;
                return line;
            }
            if (now_mono_ns() >= until) return {};
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }

    // A collector verdict that came after a stall this process reported without one: said once, as it comes.
    void check_collector_verdict() {
        if (rt_.cfg.collector.empty()) return;
        std::string line;
        uint64_t at = 0;
        if (!rt_.collector_verdict.get(line, at) || at <= said_collector_at_) return;
        // Said once per node: by the rank that printed a stall's full report here, and, where this node sees only part
        // of a communicator of this process, by the node's first rank where none was: a node whose ranks are not held
        // up (the culprit's node, a mismatch that does not hang) still says the job's verdict. A rank that printed a
        // pointer to the node's report writes it into its report file only.
        bool stalled_here = false;
        for (const auto& [id, w] : watch_) stalled_here = stalled_here || w.clock.stall_reported();
        if (!stalled_here && !(sees_part_ && node_first_rank())) return;
        said_collector_at_ = at;
        if (dumps_.printed_full_report() || !stalled_here)
            dumps_.report_collector_verdict(line);
        else
            dumps_.record_collector_verdict(line);
    }

    // This process is its node's first rank: local rank 0 (LOCAL_RANK, or the launcher's like); where the launcher
    // set none, the lowest global rank among this host's rank files in the job folder.
    bool node_first_rank() {
        if (rt_.id.local_rank >= 0) return rt_.id.local_rank == 0;
        for (const FileSnapshot& f : sibling_snapshots(false))
            if (f.header.pid != rt_.id.pid && f.header.global_rank >= 0 && f.header.global_rank < rt_.id.global_rank)
                return false;
        return true;
    }

    // A stall's dumps on this node, said once by its reporter: when every sibling asked wrote one since, or at the
    // deadline, one line (report::node_dumps_line). Checked each poll; nothing waits for them.
    void check_node_dumps(uint64_t now) {
        for (auto it = node_dumps_.begin(); it != node_dumps_.end();) {
            std::vector<int> late;
            for (const NodeDumps::Asked& a : it->asked) {
                const RankFile* f = siblings_.find(a.file);
                if (!f || f->header().dumps_written <= a.before) late.push_back(a.global_rank);
            }
            if (!late.empty() && now < it->deadline_ns) {
                ++it;
                continue;
            }
            std::sort(late.begin(), late.end());
            const size_t asked = it->asked.size() + 1;  // and this process
            dumps_.say_node_dumps(
                report::node_dumps_line("stall", asked - late.size(), asked, dumps_.node_dumps_pattern(), late));
            it = node_dumps_.erase(it);
        }
    }

    // Asks the communicator's other ranks on this node for a dump (each captures its Python stacks first) and waits
    // until each that may have stacks published a new capture, for at most three of their polls. false: none asked.
    bool ask_sibling_stacks(const CommResult& c, std::set<std::string>& asked, NodeDumps& dumps) {
        std::vector<std::pair<std::string, uint64_t>> waiting;  // file, its py_stacks_seq before the request
        for (const verdict::RankCommState& r : c.view.ranks) {
            if (r.pid == rt_.id.pid || asked.count(r.file)) continue;
            const RankFile* f = siblings_.find(r.file);
            if (!f) continue;
            const HeaderInfo h = f->header();
            if (!request_dump(r.file)) continue;
            asked.insert(r.file);
            dumps.asked.push_back({r.file, h.dumps_written, r.global_rank});
            // Those known to have no stacks to give are not waited for.
            const auto st = disk::PyStacksStatus(h.py_stacks_status);
            if (h.py_stacks_capacity && st != disk::PyStacksStatus::NotPython && st != disk::PyStacksStatus::Disabled &&
                st != disk::PyStacksStatus::Unavailable)
                waiting.emplace_back(r.file, h.py_stacks_seq);
        }
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(3 * rt_.cfg.poll_ms, 300, 2000));
        while (!waiting.empty() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                         [&](const auto& w) {
                                             const RankFile* f = siblings_.find(w.first);
                                             if (!f) return true;
                                             const HeaderInfo h = f->header();
                                             return h.py_stacks_seq != w.second && h.py_stacks_seq % 2 == 0;
                                         }),
                          waiting.end());
        }
        return !asked.empty();
    }

    // The end of a reported stall, or of a suspicion that never became one.
    void recovered(CommRuntime& cr, const StallDecision& d) {
        if (d.was_stall) {
            cr.slot.load()->stall_since_ns.store(0, std::memory_order_relaxed);
            cr.slot.load()->stall_flags.fetch_and(~uint32_t(disk::kStallActive));
        }
        // Released by an error (an abort here or on a peer, a timeout in NCCL) is an end, not a recovery.
        dumps_.report_recovered(cr, d.waited_s, d.by_failure, !d.was_stall);
    }

    // One analysis of this host's files while nothing is stalled: mismatches and, where this process has a
    // communicator timed by NCCL's profiler, GPU stragglers. A straggler is named once per communicator by the
    // straggler's own process (the others would only repeat it), and only where every rank of the communicator is on
    // this host (the engine's rule; the live collector sees across hosts).
    // p2p: the rings too, for the sends' and receives' GPU times (a pipeline's straggler).
    void check_continuous(bool mismatches, bool stragglers, bool p2p = false, bool at_exit = false) {
        Analysis a = analyze_now(0, false, mismatches, p2p, stragglers);
        for (const JobResult& j : a.jobs) {
            if (j.job_id != rt_.id.job_id) continue;
            for (const CommResult& c : j.comms) {
                // At exit, a communicator this process had (its teardown has unregistered it by then).
                const bool mine = at_exit ? std::any_of(c.view.ranks.begin(), c.view.ranks.end(),
                                                        [&](const auto& r) { return r.pid == rt_.id.pid; })
                                          : rt_owns(c.comm_id);
                if (!mine) continue;
                if (!c.missing.empty()) sees_part_ = true;
                dumps_.learn_node_stderr(c);
                CommWatch& w = watch_[c.comm_id];
                bool held = false;
                for (const verdict::Verdict& v : c.verdicts) {
                    if (v.kind == verdict::Kind::Straggler && is_me(c, v) && judged_on_gpu(c, v) &&
                        w.stragglers_reported.insert(v.culprits.front()).second)
                        dumps_.report_straggler(j, c, v);
                    // A drift (a skipped or added op, engine/verdict.h) is reported once as its verdict; the
                    // MISMATCHes that follow from it are in that report, as its consequences.
                    const bool drift = verdict::drift_only(v);
                    if ((v.kind != verdict::Kind::Mismatch || v.consequence) && !drift) continue;
                    const uint64_t upto = drift ? v.drift->last_differ : v.seq;
                    if (upto <= w.last_mismatch_seq || held) continue;  // after a held one, its later ones wait
                    // Held for the drift that may explain it; no longer at exit, when no op comes after.
                    if (!drift && !at_exit && (held = w.hold_mismatch(c.view, v.seq, now_mono_ns()))) continue;
                    if (drift) w.release();
                    w.last_mismatch_seq = upto;
                    dumps_.report_mismatch(
                        j, c, v, own_view_partial(&c) ? collector_verdict_since(issued_at(c, v.seq)) : std::string(),
                        at_exit);
                }
            }
        }
    }

    // profiler_publish walks the registry (comm_pool.h: a short walk of ours).
    void publish_profiler() {
        PassScope walk(&rt_.watchdog_reads);
        profiler_publish(rt_);
    }

    // A communicator of this process timed by NCCL's profiler (p2p: one that carried sends or receives).
    bool own_profiler_comm(bool p2p = false) {
        bool found = false;
        PassScope walk(&rt_.watchdog_reads);
        rt_.comms.for_each([&](CommRuntime& cr) {
            const disk::CommSlot* s = cr.slot.load();
            found =
                found || (s && s->gpu_source.load(std::memory_order_relaxed) == uint32_t(disk::GpuSource::Profiler) &&
                          (!p2p || s->p2p_sends.load(std::memory_order_relaxed) ||
                           s->p2p_recvs.load(std::memory_order_relaxed)));
        });
        return found;
    }

    // When this process issued collective `seq` of the communicator (0: not known): a verdict about it came after.
    uint64_t issued_at(const CommResult& c, uint64_t seq) const {
        for (const verdict::RankCommState& r : c.view.ranks)
            if (r.pid == rt_.id.pid && r.host == rt_.id.host)
                if (const verdict::OpSig* s = verdict::find_sig(r, seq)) return s->t_issue_ns;
        return 0;
    }

    // The verdict's one culprit is this process.
    bool is_me(const CommResult& c, const verdict::Verdict& v) const {
        if (v.culprits.size() != 1) return false;
        for (const verdict::RankCommState& r : c.view.ranks)
            if (r.comm_rank == v.culprits.front()) return r.pid == rt_.id.pid && r.host == rt_.id.host;
        return false;
    }

    // Judged from GPU times: collectives' spans, or (a pipeline's stage) sends' and receives'.
    static bool judged_on_gpu(const CommResult& c, const verdict::Verdict& v) {
        return disk::is_p2p(disk::OpType(v.op.op)) ||
               std::any_of(c.view.ranks.begin(), c.view.ranks.end(),
                           [](const verdict::RankCommState& r) { return !r.gpu_spans.empty(); });
    }

    bool rt_owns(uint64_t comm_id) {
        bool found = false;
        PassScope walk(&rt_.watchdog_reads);
        rt_.comms.for_each([&](CommRuntime& cr) { found = found || cr.comm_id == comm_id; });
        return found;
    }

    Runtime& rt_;
    std::timed_mutex mu_;  // the watchdog's state, shared with the exit handler
    DumpWriter dumps_;
    SiblingFiles siblings_;
    std::map<uint64_t, CommWatch> watch_;
    uint64_t teardown_reported_ = 0;     // the start of the teardown call last reported (check_teardown_hang)
    uint64_t said_collector_at_ = 0;     // the live collector's verdict already in a report (its arrival time)
    bool sees_part_ = false;             // a communicator of this process has ranks with no rank file on this node
    std::vector<NodeDumps> node_dumps_;  // stalls this process reported in full, their node's dumps not said yet
    // How long the reporter of a stall waits for the dumps it asked its siblings for before it says which came.
    static constexpr uint64_t kNodeDumpsWaitNs = 3000000000ull;
    // How long a stall report that cannot name the culprit waits for the collector's verdict of the same stall.
    static constexpr uint64_t kCollectorWaitNs = 2000000000ull;
};

Watchdog* g_watchdog = nullptr;

}  // namespace

void start_watchdog(Runtime& rt) {
    if (g_started.exchange(true)) return;
    install_sigusr1();
    g_watchdog = new Watchdog(rt);  // never freed: the thread runs until the process ends
    std::thread([w = g_watchdog] {
        try {
            w->run();
        } catch (const std::exception& e) {
            log().error("the watchdog stopped: {}", e.what());
        } catch (...) {
            log().error("the watchdog stopped");
        }
    }).detach();
}

void watchdog_forget_after_fork() {
    g_started.store(false);
    g_watchdog = nullptr;
}

void watchdog_on_exit(Runtime&) {
    if (g_watchdog) g_watchdog->on_exit();
}

}  // namespace ncw

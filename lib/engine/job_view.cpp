// Grouping rank files into jobs and communicators, putting every timestamp of a job on one clock, and running the
// verdict engine per communicator.
#include "engine/job_view.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <unordered_map>

#include "engine/cascade.h"
#include "engine/straggler.h"
#include "ncclwatch/format.h"

namespace ncw {

namespace {

// Larger communicators than this are taken for damage (the missing-rank list would be absurd).
constexpr int32_t kMaxRanks = 1 << 20;

std::string hex(uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "0x%016llx", (unsigned long long)v);
    return buf;
}

uint64_t clock_ns(clockid_t id) {
    timespec ts{};
    clock_gettime(id, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The clock a job is analysed on: one boot's CLOCK_MONOTONIC, with `mono` and `real` naming the same instant ("now").
struct Frame {
    uint64_t boot = 0;
    uint64_t mono = 0;
    uint64_t real = 0;
};

// Offset that moves a file's monotonic timestamps onto the frame's clock. Exact (0) on the same boot; across boots
// it goes through both realtime anchors, so it is as good as the hosts' clock synchronisation.
int64_t offset_to(const HeaderInfo& h, const Frame& f) {
    if (h.boot_id_hash != 0 && h.boot_id_hash == f.boot) return 0;
    if (!h.start_real_ns || !f.real) return 0;
    return int64_t((h.start_real_ns - h.start_mono_ns) - (f.real - f.mono));  // unsigned wrap, then signed
}

uint64_t shift(uint64_t t, int64_t d) {
    if (!t || !d) return t;  // 0 means "never": keep it
    if (d > 0) return t + uint64_t(d);
    const uint64_t back = uint64_t(-(d + 1)) + 1;
    return back >= t ? 1 : t - back;
}

constexpr double kOfflineStaleSec = 1.0;

// The latest moment the file shows the process alive: its heartbeat, or its last activity if later or no heartbeat.
uint64_t last_seen(const FileSnapshot& f) {
    uint64_t t = std::max(f.header.heartbeat_mono_ns, f.header.start_mono_ns);
    for (const auto& c : f.comms) t = std::max({t, c.t_last_issue_ns, c.t_last_progress_ns});
    return t;
}

uint64_t to_real(const HeaderInfo& h, uint64_t mono) {
    if (!h.start_real_ns || mono < h.start_mono_ns) return 0;
    return mono - h.start_mono_ns + h.start_real_ns;
}

void rebase(CommInfo& c, int64_t d) {
    c.t_init_start_ns = shift(c.t_init_start_ns, d);
    c.t_init_done_ns = shift(c.t_init_done_ns, d);
    c.t_last_issue_ns = shift(c.t_last_issue_ns, d);
    c.t_last_progress_ns = shift(c.t_last_progress_ns, d);
    c.stall_since_ns = shift(c.stall_since_ns, d);
    for (auto& s : c.recent) s.t_issue_ns = shift(s.t_issue_ns, d);
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

namespace {

// Per (comm, peer): the highest send/recv seq issued and completed, and the oldest pending one's issue time. p2p seqs
// count per (comm, peer, direction) and complete in order, so the highest seq is the count even after the ring
// wrapped. Only files whose comm slots show p2p traffic pay for reading the ring.
void read_p2p(const RankFile& file, FileSnapshot& s) {
    std::vector<uint64_t> comm_ids;
    for (const auto& c : s.comms)
        if (c.p2p_sends || c.p2p_recvs) comm_ids.push_back(c.comm_id);
    s.p2p_read = true;
    if (comm_ids.empty()) return;
    const RecordSet set = file.records();
    s.p2p_wrapped = set.first_ticket > 0 || set.dropped > 0;
    auto entry = [&](uint64_t comm_id, int peer) -> verdict::PeerP2p& {
        auto t = std::find_if(s.p2p.begin(), s.p2p.end(), [&](const auto& x) { return x.comm_id == comm_id; });
        if (t == s.p2p.end()) t = s.p2p.insert(s.p2p.end(), FileSnapshot::P2pTable{comm_id, {}});
        auto e = std::find_if(t->peers.begin(), t->peers.end(), [&](const auto& x) { return x.peer == peer; });
        if (e == t->peers.end()) {
            verdict::PeerP2p p;
            p.peer = peer;
            e = t->peers.insert(t->peers.end(), p);
        }
        return *e;
    };
    auto done = [](const Record& r) {
        // Without GPU tracking, completion means the call returned (as for collectives).
        return r.t_done_ns != 0 || ((r.flags & (disk::kFlagUntracked | disk::kFlagCaptured)) && r.t_return_ns != 0);
    };
    auto is_p2p_of_interest = [&](const Record& r) {
        return disk::is_p2p(disk::OpType(r.op)) && r.peer_or_root >= 0 &&
               std::find(comm_ids.begin(), comm_ids.end(), r.comm_id) != comm_ids.end();
    };
    for (const auto& r : set.records) {
        if (!is_p2p_of_interest(r)) continue;
        auto& e = entry(r.comm_id, r.peer_or_root);
        const bool send = disk::OpType(r.op) == disk::OpType::Send;
        auto& issued = send ? e.sends_issued : e.recvs_issued;
        auto& completed = send ? e.sends_completed : e.recvs_completed;
        issued = std::max(issued, r.seq);
        if (done(r)) completed = std::max(completed, r.seq);
    }
    for (const auto& r : set.records) {
        if (!is_p2p_of_interest(r)) continue;
        auto& e = entry(r.comm_id, r.peer_or_root);
        const bool send = disk::OpType(r.op) == disk::OpType::Send;
        if (r.seq <= (send ? e.sends_completed : e.recvs_completed) || !r.t_issue_ns) continue;
        auto& t = send ? e.t_oldest_send_pending_ns : e.t_oldest_recv_pending_ns;
        if (!t || r.t_issue_ns < t) t = r.t_issue_ns;
    }
}

// Offline, the signature window (the last 64 collectives per communicator) may have rolled past a mismatch that NCCL
// completed silently while the job went on. The newest kHistoryRecords ring records give the collectives before the
// window, so the mismatch scan sees them too; bounded, so 1,024 files stay a few tens of MB.
constexpr uint64_t kHistoryRecords = 2048;

void read_history(const RankFile& file, FileSnapshot& s) {
    if (s.comms.empty()) return;
    const uint64_t ticket = s.header.write_ticket;
    const RecordSet set = file.records(ticket > kHistoryRecords ? ticket - kHistoryRecords : 0);
    for (auto& c : s.comms) {
        uint64_t oldest = UINT64_MAX;
        for (const auto& g : c.recent) oldest = std::min(oldest, g.seq);
        std::vector<SigInfo> older;
        for (const auto& r : set.records) {
            if (r.comm_id != c.comm_id || !disk::is_collective(disk::OpType(r.op)) || !r.seq || r.seq >= oldest)
                continue;
            SigInfo g;
            g.seq = r.seq;
            g.count = r.count;
            g.t_issue_ns = r.t_issue_ns;
            g.op = r.op;
            g.dtype = r.dtype;
            g.flags = r.flags;
            g.redop = r.redop;
            g.root = disk::is_rooted(disk::OpType(r.op)) ? r.peer_or_root : -1;
            g.tid = r.tid;
            g.stream = r.stream;
            older.push_back(g);
        }
        if (older.empty()) continue;
        std::sort(older.begin(), older.end(), [](const SigInfo& a, const SigInfo& b) { return a.seq < b.seq; });
        older.erase(
            std::unique(older.begin(), older.end(), [](const SigInfo& a, const SigInfo& b) { return a.seq == b.seq; }),
            older.end());
        c.recent.insert(c.recent.begin(), older.begin(), older.end());
    }
}

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

FileSnapshot snapshot(const RankFile& file, bool with_p2p) noexcept {
    FileSnapshot s;
    try {
        s.path = file.path();
        if (!file.is_open()) {
            s.error = file.error().empty() ? "not open" : file.error();
            return s;
        }
        s.ok = true;
        s.warnings = file.warnings();
        s.header = file.header();
        s.comms = file.comms();
        if (with_p2p) {
            read_p2p(file, s);
            read_history(file, s);
        }
    } catch (...) {
        s.ok = false;
        s.error = "out of memory while reading";
    }
    return s;
}

FileSnapshot snapshot_path(const std::string& path, bool with_p2p) noexcept {
    RankFile f;
    f.open(path);
    return snapshot(f, with_p2p);
}

std::vector<Analysis::VerdictRef> Analysis::all_verdicts() const {
    std::vector<VerdictRef> out;
    for (const auto& j : jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts) out.push_back({&j, &c, &v});
    std::stable_sort(out.begin(), out.end(), [](const VerdictRef& a, const VerdictRef& b) {
        return verdict_importance(a.verdict->kind) < verdict_importance(b.verdict->kind);
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

Analysis analyze(const std::vector<FileSnapshot>& files, const AnalysisOptions& opt) noexcept {
    Analysis a;
    try {
        std::map<std::string, std::vector<const FileSnapshot*>> by_job;
        for (const auto& f : files) {
            FileSummary sum;
            sum.path = f.path;
            sum.ok = f.ok;
            sum.error = f.error;
            if (f.ok) {
                sum.job_id = f.header.job_id;
                sum.host = f.header.host;
                sum.pid = f.header.pid;
                sum.global_rank = f.header.global_rank;
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
            const std::string job_name = job_id.empty() ? "(no job id)" : job_id;
            JobResult jr;
            jr.job_id = job_id;
            for (const auto* f : job_files) jr.files.push_back(f->path);

            Frame frame;
            LivenessContext ctx;
            if (opt.live) {
                frame.boot = this_boot_id_hash();
                frame.mono = opt.now_mono_ns ? opt.now_mono_ns : clock_ns(CLOCK_MONOTONIC);
                frame.real = opt.now_mono_ns ? opt.now_real_ns : clock_ns(CLOCK_REALTIME);
                ctx = live_context(frame.mono, opt.stale_after_s);
            } else {
                // The newest sign of life in the job is "now": a dump copied the next morning still analyses as of
                // the hang. Compared in wall-clock time, since the files may come from several hosts.
                const FileSnapshot* ref = job_files.front();
                uint64_t best = 0;
                for (const auto* f : job_files) {
                    const uint64_t r = to_real(f->header, last_seen(*f));
                    if (r > best) best = r, ref = f;
                }
                frame.boot = ref->header.boot_id_hash;
                frame.mono = last_seen(*ref);
                frame.real = to_real(ref->header, frame.mono);
                ctx.live = false;
                ctx.now_mono_ns = frame.mono;
                // After the fact, a process whose heartbeat stopped a second before the job's last sign of life died
                // first (torchrun then kills the others within a few hundred milliseconds).
                ctx.stale_after_s = std::min(opt.stale_after_s, kOfflineStaleSec);
            }
            jr.now_mono_ns = frame.mono;
            jr.now_real_ns = frame.real;

            std::map<uint64_t, Acc> comms;
            for (const auto* f : job_files) {
                const int64_t d = offset_to(f->header, frame);
                HeaderInfo h = f->header;
                h.heartbeat_mono_ns = shift(h.heartbeat_mono_ns, d);
                const uint64_t seen = shift(last_seen(*f), d);
                for (const auto& c : f->comms) {
                    if (c.state == uint32_t(disk::CommState::Free)) continue;  // slot claimed, not filled in yet
                    if (c.comm_id == 0) {
                        a.warnings.push_back(f->path + ": comm slot " + std::to_string(c.slot) +
                                             " has no communicator id yet (" + disk::comm_state_name(c.state) +
                                             "); skipped");
                        continue;
                    }
                    if (c.nranks <= 0 || c.nranks > kMaxRanks || c.rank < 0 || c.rank >= c.nranks) {
                        a.warnings.push_back(f->path + ": comm " + hex(c.comm_id) + " (slot " + std::to_string(c.slot) +
                                             "): rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) +
                                             " is not known yet or out of range; skipped");
                        continue;
                    }
                    CommInfo cc = c;
                    rebase(cc, d);
                    auto st = to_rank_comm_state(h, cc, f->path, ctx);
                    st.local_rank = h.local_rank;
                    st.world_size = h.world_size;
                    st.nranks_declared = c.nranks;
                    st.master_addr = master_of(h);
                    // Rebased exactly on one boot; through the wall clocks otherwise, as good as their NTP sync.
                    st.clock_uncertainty_s = d == 0 && h.boot_id_hash == frame.boot ? 0.0 : -1.0;
                    if (f->p2p_read) {
                        st.p2p_known = true;
                        st.p2p_wrapped = f->p2p_wrapped;
                        for (const auto& t : f->p2p)
                            if (t.comm_id == c.comm_id) st.p2p = t.peers;
                        for (auto& e : st.p2p) {
                            e.t_oldest_send_pending_ns = shift(e.t_oldest_send_pending_ns, d);
                            e.t_oldest_recv_pending_ns = shift(e.t_oldest_recv_pending_ns, d);
                        }
                    }

                    auto& acc = comms[c.comm_id];
                    if (acc.r.view.ranks.empty() && acc.r.view.nranks == 0) {
                        acc.r.job_id = job_id;
                        acc.r.comm_id = c.comm_id;
                        acc.r.parent_id = c.parent_id;
                        acc.r.view.comm_id = c.comm_id;
                        acc.r.view.nranks = c.nranks;
                    }
                    acc.first_slot = std::min(acc.first_slot, c.slot);
                    if (acc.r.name.empty()) acc.r.name = c.name;
                    if (c.nranks != acc.r.view.nranks) {
                        if (!acc.nranks_conflict)
                            a.warnings.push_back("job " + job_name + ", comm " + hex(c.comm_id) +
                                                 ": ranks disagree on the communicator size (" +
                                                 std::to_string(acc.r.view.nranks) + " vs " + std::to_string(c.nranks) +
                                                 " in " + f->path + "); using the larger");
                        acc.nranks_conflict = true;
                        acc.r.view.nranks = std::max(acc.r.view.nranks, c.nranks);
                    }
                    auto& ranks = acc.r.view.ranks;
                    auto found = acc.index.find(c.rank);
                    auto it = found == acc.index.end() ? ranks.end() : ranks.begin() + ptrdiff_t(found->second);
                    if (it == ranks.end()) {
                        acc.index.emplace(c.rank, ranks.size());
                        ranks.push_back(std::move(st));
                        acc.seen.push_back(seen);
                        continue;
                    }
                    // Two files claim one rank: a restarted process, or one file analysed twice. The newer wins.
                    const size_t i = size_t(it - ranks.begin());
                    const bool newer = seen > acc.seen[i];
                    a.warnings.push_back("job " + job_name + ", comm " + hex(c.comm_id) + ": rank " +
                                         std::to_string(c.rank) + " appears in " + it->file + " and " + f->path +
                                         "; using " + (newer ? f->path : it->file) + " (newer)");
                    if (newer) {
                        *it = std::move(st);
                        acc.seen[i] = seen;
                    }
                }
            }

            std::vector<Acc*> order;
            for (auto& [id, acc] : comms) order.push_back(&acc);
            std::stable_sort(order.begin(), order.end(),
                             [](const Acc* x, const Acc* y) { return x->first_slot < y->first_slot; });
            for (Acc* acc : order) {
                CommResult& r = acc->r;
                std::sort(r.view.ranks.begin(), r.view.ranks.end(),
                          [](const verdict::RankCommState& x, const verdict::RankCommState& y) {
                              return x.comm_rank < y.comm_rank;
                          });
                std::vector<bool> seen_rank(size_t(r.view.nranks), false);
                for (const auto& s : r.view.ranks) seen_rank[size_t(s.comm_rank)] = true;
                for (int i = 0; i < r.view.nranks; ++i)
                    if (!seen_rank[size_t(i)]) r.missing.push_back(i);
                if (!r.missing.empty())
                    a.warnings.push_back("job " + job_name + ", comm " + hex(r.comm_id) + ": " +
                                         (r.missing.size() == 1 ? "rank " : "ranks ") + format_ranks(r.missing) +
                                         " of " + std::to_string(r.view.nranks) +
                                         " not visible (no rank file here; normal when other nodes' files "
                                         "were not gathered)");

                if (opt.mismatches) r.verdicts = verdict::find_mismatches(r.view);
                if (opt.stalls) {
                    // diagnose_stall repeats the mismatch at the stalled seq: keep one copy, the stall's (it knows
                    // who waits and for how long).
                    for (auto& v : verdict::diagnose_stall(r.view, frame.mono, opt.timeout_s)) {
                        auto dup = std::find_if(r.verdicts.begin(), r.verdicts.end(),
                                                [&](const verdict::Verdict& x) { return same_verdict(x, v); });
                        if (dup != r.verdicts.end())
                            *dup = std::move(v);
                        else
                            r.verdicts.push_back(std::move(v));
                    }
                }
                if (opt.stragglers) {
                    const bool exact = std::all_of(r.view.ranks.begin(), r.view.ranks.end(),
                                                   [](const auto& x) { return x.clock_uncertainty_s == 0; });
                    r.view.clock_note = exact ? "one boot's monotonic clock (exact)"
                                              : "clock offsets from wall clocks, uncertainty unknown (NTP)";
                    for (auto& v : verdict::find_stragglers(r.view)) r.verdicts.push_back(std::move(v));
                }
                jr.comms.push_back(std::move(r));
            }
            // Job-level: which stalled communicator initiated, which wait because of it.
            std::vector<verdict::CommVerdicts> cv;
            for (auto& c : jr.comms) cv.push_back({&c.view, &c.verdicts});
            verdict::assign_cascade_roles(cv);
            for (auto& c : jr.comms)
                std::stable_sort(c.verdicts.begin(), c.verdicts.end(),
                                 [](const verdict::Verdict& x, const verdict::Verdict& y) {
                                     return verdict_importance(x.kind) < verdict_importance(y.kind);
                                 });
            std::vector<audit::ProcessFacts> facts;
            for (const auto* f : job_files) facts.push_back(audit::ProcessFacts{&f->header, &f->comms});
            jr.audit = audit::audit_job(facts);
            a.jobs.push_back(std::move(jr));
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
        Analysis a;
        try {
            a.warnings.push_back("analysis failed: out of memory");
        } catch (...) {
        }
        return a;
    }
}

}  // namespace ncw

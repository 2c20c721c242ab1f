// The verdict line, one case per verdict kind (see headline.h).
#include "report/headline.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>

#include "engine/causal.h"
#include "engine/verdict_ranks.h"
#include "ncclwatch/format.h"
#include "report/report_json.h"

namespace ncw::report {

using verdict::Kind;
using verdict::RankCommState;
using verdict::Role;

std::string plural(size_t n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

// Looked up for every waiting rank of a verdict: not a scan (verdict_ranks.h).
const RankCommState* find_rank(const CommResult& c, int comm_rank) { return verdict::state_of_rank(c.view, comm_rank); }

bool is_world(const JobResult& job, const CommResult& c) {
    if (c.parent_id) return false;
    for (const auto& o : job.comms)
        if (o.view.nranks > c.view.nranks) return false;
    return true;
}

bool ranks_are_global(const JobResult& job, const CommResult& c) {
    if (!is_world(job, c)) return false;
    bool sized = false;
    for (const auto& r : c.view.ranks) {
        if (r.global_rank != r.comm_rank) return false;
        sized = sized || r.world_size == c.view.nranks;
    }
    return sized;
}

std::vector<int> global_ranks(const JobResult& job, const CommResult& c, const std::vector<int>& comm_ranks) {
    std::vector<int> out;
    out.reserve(comm_ranks.size());
    int by_comm_rank = -1;  // ranks_are_global, once it is asked: -1 not yet
    for (int cr : comm_ranks) {
        if (const RankCommState* r = find_rank(c, cr)) {
            out.push_back(r->global_rank);
            continue;
        }
        if (by_comm_rank < 0) by_comm_rank = ranks_are_global(job, c) ? 1 : 0;
        out.push_back(by_comm_rank && cr >= 0 && cr < c.view.nranks ? cr : -1);
    }
    return out;
}

int known_global_rank(const JobResult& job, const CommResult& c, int comm_rank) {
    return global_ranks(job, c, {comm_rank}).front();
}

// "communicator 0x... (world, 512 ranks)"
std::string comm_words(const JobResult& job, const CommResult& c) {
    std::string what;
    if (!c.name.empty()) what = "\"" + clean(c.name) + "\", ";
    if (c.parent_id)
        what += "split of " + hex(c.parent_id) + ", ";
    else if (is_world(job, c))
        what += "world, ";
    return fmt::format("communicator {} ({}{})", hex(c.comm_id), what, plural(size_t(c.view.nranks), "rank", "ranks"));
}

uint64_t stalled_since_real_ns(const JobResult& job, const verdict::Verdict& v) {
    if (!job.now_real_ns || v.stalled_for_s <= 0) return 0;
    const uint64_t back = uint64_t(v.stalled_for_s * 1e9);
    return back > job.now_real_ns ? 0 : job.now_real_ns - back;
}

namespace {

// "rank 317 (host node39, GPU 5, pid 81234)": the global rank where known, the comm rank where it differs.
std::string where(const JobResult& job, const CommResult& c, int comm_rank) {
    const RankCommState* r = find_rank(c, comm_rank);
    if (!r) {
        const int g = known_global_rank(job, c, comm_rank);
        return g >= 0 ? fmt::format("rank {} (no rank file here)", g)
                      : fmt::format("comm rank {} (no rank file here)", comm_rank);
    }
    std::string out =
        r->global_rank >= 0 ? fmt::format("rank {} (", r->global_rank) : fmt::format("comm rank {} (", comm_rank);
    if (r->global_rank >= 0 && r->global_rank != comm_rank) out += fmt::format("comm rank {}, ", comm_rank);
    out += "host " + (r->host.empty() ? std::string("?") : clean(r->host));
    if (r->cuda_dev >= 0) out += fmt::format(", GPU {}", r->cuda_dev);
    out += fmt::format(", pid {})", r->pid);
    return out;
}

// The culprits in words: each one with where it runs when there are few, a compressed list when there are many.
std::string who(const JobResult& job, const CommResult& c, const std::vector<int>& ranks) {
    if (ranks.empty()) return "no visible rank";
    if (ranks.size() <= 3) {
        std::string out;
        for (size_t i = 0; i < ranks.size(); ++i)
            out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + where(job, c, ranks[i]);
        return out;
    }
    std::vector<int> global;
    std::set<std::string> hosts;
    bool all_global = true;
    for (int r : ranks) {
        const RankCommState* s = find_rank(c, r);
        if (!s || s->global_rank < 0) all_global = false;
        if (s) global.push_back(s->global_rank), hosts.insert(s->host);
    }
    if (all_global)
        return fmt::format("ranks {} ({} on {})", format_ranks(global), plural(ranks.size(), "rank", "ranks"),
                           plural(hosts.size(), "host", "hosts"));
    return fmt::format("comm ranks {} ({})", format_ranks(ranks), plural(ranks.size(), "rank", "ranks"));
}

std::string op_words(const verdict::Verdict& v) {
    if (disk::OpType(v.op.op) == disk::OpType::None) return fmt::format("#{}", v.seq);
    return fmt::format("{} #{}", disk::op_name(v.op.op), v.seq);
}

// "since 2026-11-30T02:14:07.123+00:00" (RFC 3339) from the job's "now" and the stall length; "" when the wall-clock
// time is unknown.
std::string since(const JobResult& job, const verdict::Verdict& v) {
    const uint64_t t = stalled_since_real_ns(job, v);
    return t ? " since " + text::rfc3339(t) : "";
}

std::string waiters(const verdict::Verdict& v) {
    return v.waiting.size() == 1 ? "1 rank waits" : fmt::format("{} ranks wait", v.waiting.size());
}

std::string hosts_of(const CommResult& c) {
    std::set<std::string> hosts;
    for (const auto& r : c.view.ranks) hosts.insert(clean(r.host));
    std::string out;
    size_t n = 0;
    for (const auto& h : hosts) {
        if (++n > 8) {
            out += fmt::format(" and {} more", hosts.size() - 8);
            break;
        }
        out += (out.empty() ? "" : ", ") + h;
    }
    return out;
}

bool culprit_gone(const CommResult& c, const verdict::Verdict& v) {
    for (int r : v.culprits)
        if (const auto* s = find_rank(c, r); s && s->exited_clean) return false;
    return true;
}

// How the culprits ended: in the engine's words where one culprit's file recorded it (format 1.5), else what the
// liveness says.
std::string dead_words(const CommResult& c, const verdict::Verdict& v) {
    if (v.culprits.size() == 1)
        if (const auto* s = find_rank(c, v.culprits[0]); s && (s->end_kind || !s->last_words.empty()))
            return verdict::end_words(*s);
    return culprit_gone(c, v) ? "is gone (process killed or crashed)" : "has exited";
}

// The op the culprits issued at the verdict's seq when it is not the verdict's op (the majority's), so that a
// Broadcast among AllReduces is named as what it is. Nothing when they issued the same op (it differs in dtype,
// count, root or redop), when their ops differ among themselves or are not visible, and for p2p (whose seq counts
// sends or receives, not collectives).
std::optional<uint8_t> odd_op(const CommResult& c, const verdict::Verdict& v) {
    if (!disk::is_collective(disk::OpType(v.op.op))) return std::nullopt;
    std::optional<uint8_t> op;
    for (int r : v.culprits) {
        const RankCommState* s = find_rank(c, r);
        if (!s) continue;
        const auto sig =
            std::find_if(s->recent.begin(), s->recent.end(), [&](const verdict::OpSig& g) { return g.seq == v.seq; });
        if (sig == s->recent.end()) continue;
        if (op && *op != sig->op) return std::nullopt;
        op = sig->op;
    }
    if (op && *op == v.op.op) return std::nullopt;
    return op;
}

// A point-to-point verdict's peer (OpSig::root holds it), as a global rank where known; nothing for a collective.
std::optional<int> p2p_peer(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    const auto op = disk::OpType(v.op.op);
    if ((op != disk::OpType::Send && op != disk::OpType::Recv) || v.op.root < 0) return std::nullopt;
    const int g = known_global_rank(job, c, v.op.root);
    return g >= 0 ? g : v.op.root;
}

// "rank 5" (global where known).
std::string rank_name(const RankCommState& r) {
    return r.global_rank >= 0 ? fmt::format("rank {}", r.global_rank) : fmt::format("comm rank {}", r.comm_rank);
}

// "ranks 0,1,2" from global ranks (-1: not known).
std::string global_words(const std::vector<int>& g) {
    std::vector<int> known;
    for (int r : g)
        if (r >= 0) known.push_back(r);
    if (known.size() != g.size()) return plural(g.size(), "rank", "ranks");
    return (known.size() == 1 ? "rank " : "ranks ") + format_ranks(known);
}

// DEADLOCK: the culprits (those the first link waits for) wait in the next link's op for its ranks, which wait in the
// one after, back to the first link's op, which waits for the culprits.
std::string deadlock_words(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    const size_t n = v.cycle.size();
    std::string s = fmt::format("deadlock across communicators: {}", who(job, c, v.culprits));
    if (n < 2) return s;
    bool one = v.culprits.size() == 1;
    for (size_t k = 1; k <= n; ++k) {
        const auto& link = v.cycle[k % n];
        const bool back = k == n;
        const std::string whom = back ? (v.culprits.size() == 1 ? "it" : "them") : global_words(link.for_global);
        s += fmt::format("{} {} in {} #{} on communicator {} for {}", k == 1 ? "" : ", which", one ? "waits" : "wait",
                         disk::op_name(link.op.op), link.seq, hex(link.comm_id), whom);
        one = link.for_global.size() == 1;
    }
    return s + ": they issued their ops on these communicators in different orders";
}

// "16,777,216"
std::string grouped_digits(uint64_t n) {
    std::string d = std::to_string(n), out;
    for (size_t i = 0; i < d.size(); ++i) {
        if (i && (d.size() - i) % 3 == 0) out += ',';
        out += d[i];
    }
    return out;
}

// "64 MiB", "4 KiB", "12 bytes": whole units where exact, else one decimal.
std::string byte_words(uint64_t b) {
    static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    size_t u = 0;
    while (v >= 1024 && u + 1 < std::size(units)) v /= 1024, ++u;
    if (u == 0) return fmt::format("{} {}", b, b == 1 ? "byte" : "bytes");
    return v == double(uint64_t(v)) ? fmt::format("{} {}", uint64_t(v), units[u])
                                    : fmt::format("{:.1f} {}", v, units[u]);
}

// "16,777,216 float32 (64 MiB)"
std::string elements_words(const verdict::OpSig& g, bool with_dtype) {
    return fmt::format("{}{}{} ({})", grouped_digits(g.count), with_dtype ? " " : "",
                       with_dtype ? disk::dtype_name(g.dtype) : "", byte_words(g.count * disk::dtype_size(g.dtype)));
}

// MISMATCH of a pair's sizes, from the culprit's side: "rank 3 (...) sends 16,777,216 float32 (64 MiB) to rank 0 in
// Send #10 on communicator ..., which expects 8,388,608 (32 MiB) from it in its Recv #10: the all_to_all split sizes
// disagree"
std::string pair_sizes_words(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    const auto& p = *v.pair_sizes;
    const int sender = known_global_rank(job, c, p.sender), receiver = known_global_rank(job, c, p.receiver);
    const bool by_receiver = !v.culprits.empty() && v.culprits.front() == p.receiver;
    const bool same_dtype = p.send.dtype == p.recv.dtype;
    std::string s =
        by_receiver
            ? fmt::format("{} expects {} from rank {} in Recv #{} on {}, which sends {} to it in its Send #{}",
                          who(job, c, {p.receiver}), elements_words(p.recv, true), sender >= 0 ? sender : p.sender,
                          p.recv.seq, comm_words(job, c), elements_words(p.send, !same_dtype), p.send.seq)
            : fmt::format("{} sends {} to rank {} in Send #{} on {}, which expects {} from it in its Recv #{}",
                          who(job, c, {p.sender}), elements_words(p.send, true), receiver >= 0 ? receiver : p.receiver,
                          p.send.seq, comm_words(job, c), elements_words(p.recv, !same_dtype), p.recv.seq);
    s += p.grouped ? ": the all_to_all split sizes disagree" : ": the send and its receive disagree in size";
    if (p.pairs > 1) s += fmt::format(" ({} pairs disagree)", p.pairs);
    return s;
}

// DEADLOCK of point-to-point waits on one communicator: "ranks 0 and 1 wait on each other on communicator ...: rank 0
// waits in Send #10 to rank 1, whose Recv #10 from it is queued behind rank 1's own Send #10 to rank 0; ...: issue the
// Recv first on one side, or use batch_isend_irecv"
std::string p2p_cycle_words(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    std::string s =
        fmt::format("{} wait on each other's sends and receives on {}", who(job, c, v.culprits), comm_words(job, c));
    auto op = [](const verdict::OpSig& g, int peer) {
        const bool send = disk::OpType(g.op) == disk::OpType::Send;
        return fmt::format("{} #{} {} rank {}", send ? "Send" : "Recv", g.seq, send ? "to" : "from", peer);
    };
    for (size_t k = 0; k < v.cycle.size(); ++k) {
        const auto& l = v.cycle[k];
        const int me = l.waiting_global.empty() || l.waiting_global[0] < 0 ? l.waiting.front() : l.waiting_global[0];
        const int peer = l.for_global.empty() ? l.op.root : l.for_global[0];
        const bool send = disk::OpType(l.op.op) == disk::OpType::Send;
        const int behind_peer = known_global_rank(job, c, l.behind.root);
        s += fmt::format(
            "{} rank {} waits in {}, whose {} #{} {} it {} {} own {}", k ? ";" : ":", me, op(l.op, peer),
            send ? "Recv" : "Send", l.seq, send ? "from" : "to",
            l.match_posted ? "is queued behind" : "is not posted: rank " + std::to_string(peer) + " is blocked in",
            l.match_posted ? "rank " + std::to_string(peer) + "'s" : "its",
            op(l.behind, behind_peer >= 0 ? behind_peer : l.behind.root));
    }
    return s + ": issue the Recv first on one side, or post both in one group (batch_isend_irecv)";
}

}  // namespace

StacksChoice stacks_for(const RankCommState& r, const verdict::Verdict* v) {
    StacksChoice newest{r.py_stacks.get(), r.py_stacks_reason, r.py_stacks_mono_ns, true, false};
    // The window is read from the rank's collectives: a p2p verdict's seq counts sends or receives, not those.
    if (!v || v->seq == 0 || !disk::is_collective(disk::OpType(v->op.op)) || (!r.py_stacks && !r.py_held.stacks))
        return newest;
    // The window of the rank's own clock in which it was where the verdict says (0, ~0: not bounded).
    uint64_t t_prev = 0, t_at = 0;
    for (const verdict::OpSig& g : r.recent) {
        if (g.seq == v->seq - 1) t_prev = g.t_issue_ns;
        if (g.seq == v->seq) t_at = g.t_issue_ns;
    }
    // A culprit that never joined the op was outside it: after its previous op, before this one (if it issued it
    // since: the stall recovered). Any other rank that issued it was inside it from then on.
    const bool outside = v->kind == verdict::Kind::NotJoined &&
                         std::find(v->culprits.begin(), v->culprits.end(), r.comm_rank) != v->culprits.end();
    uint64_t lo = 0, hi = ~0ull;
    if (outside || r.issued < v->seq) {
        lo = t_prev;
        if (t_at) hi = t_at;
    } else {
        lo = t_at;
        if (r.completed >= v->seq && r.t_last_progress_ns) hi = r.t_last_progress_ns + 1;
    }
    // A capture of unknown time (an older writer's) is not proven outside the window.
    auto in_window = [&](uint64_t t) { return t == 0 || (t >= lo && t < hi); };
    if (r.py_stacks && in_window(r.py_stacks_mono_ns)) return newest;
    if (r.py_held.stacks && in_window(r.py_held.mono_ns))
        return StacksChoice{r.py_held.stacks.get(), r.py_held.reason, r.py_held.mono_ns, true, true};
    newest.during = false;
    if (!newest.stacks) newest = StacksChoice{r.py_held.stacks.get(), r.py_held.reason, r.py_held.mono_ns, false, true};
    return newest;
}

std::optional<py::Where> python_where(const RankCommState& r, const verdict::Verdict* v) {
    return where_in(r, stacks_for(r, v));
}

std::optional<py::Where> where_in(const RankCommState& r, const StacksChoice& c) {
    if (!c.stacks || !c.during) return std::nullopt;
    const py::Thread* t = py::nccl_thread(*c.stacks, newest_tid(r));
    if (!t) return std::nullopt;
    py::Where w = py::where(*t);
    if (!w.known) return std::nullopt;
    return w;
}

std::string python_words(const CommResult& c, const verdict::Verdict& v) {
    // A collective's MISMATCH is about the op, not where the ranks wait; a send's or receive's names its line.
    if (v.kind == Kind::Straggler || (v.kind == Kind::Mismatch && !disk::is_p2p(disk::OpType(v.op.op)))) return "";
    std::vector<std::string> parts;
    for (int cr : v.culprits) {
        const RankCommState* r = find_rank(c, cr);
        if (!r || parts.size() >= 3) continue;
        const auto w = python_where(*r, &v);
        if (!w) continue;
        // Not inside NCCL, yet inside torch.distributed's send or receive: torch connects a pair at its first one
        // (a communicator of its own for the two, or NCCL's connection on the group's), and that waits for the peer.
        static const char* const kP2pCalls[] = {"send", "recv", "isend", "irecv", "batch_isend_irecv"};
        if (v.kind == Kind::NotJoined && r->alive &&
            std::find(std::begin(kP2pCalls), std::end(kP2pCalls), w->callee) != std::end(kP2pCalls)) {
            parts.push_back(fmt::format(
                "{} is blocked in {} at {}, outside NCCL: torch sets up a pair's connection at its first send or "
                "receive, which waits for the peer to post its match (a new peer: a wrong peer index?)",
                rank_name(*r), w->callee, py::location(w->at)));
            continue;
        }
        parts.push_back(
            fmt::format("{} {} {}", rank_name(*r), r->alive ? "is in" : "was last seen in", py::where_words(*w)));
    }
    // The waiting ranks grouped by the line they wait at, the largest groups first.
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int cr : v.waiting) {
        const RankCommState* r = find_rank(c, cr);
        if (!r) continue;
        const auto w = python_where(*r, &v);
        if (!w) continue;
        const std::string at = py::wait_words(*w);
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == at; });
        if (g == groups.end()) g = groups.insert(groups.end(), {at, {}});
        g->second.push_back(r->global_rank >= 0 ? r->global_rank : cr);
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    for (size_t i = 0; i < groups.size() && i < 2; ++i) {
        const auto& [at, ranks] = groups[i];
        parts.push_back(fmt::format("{} {} {}", ranks.size() == 1 ? "rank" : "ranks", format_ranks(ranks),
                                    ranks.size() == 1 ? "waits in " + at : "wait in " + at));
    }
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
}

std::string verdict_headline(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    const std::string comm = comm_words(job, c);
    const std::string culprits = who(job, c, v.culprits);
    const std::string op = op_words(v);
    std::string s;
    switch (v.kind) {
        case Kind::NotJoined:
            if (v.drift) {
                s = fmt::format("{} skipped {} on {}: {}", culprits, verdict::drift_what(*v.drift), comm,
                                verdict::drift_pairing(*v.drift));
                const bool issued_it = std::find(v.waiting.begin(), v.waiting.end(), v.drift->rank) != v.waiting.end();
                if (!v.waiting.empty())
                    s += fmt::format("; {} in {}{}{}", waiters(v), op, since(job, v),
                                     issued_it ? "" : ", which it never issued");
                break;
            }
            if (const auto peer = p2p_peer(job, c, v)) {
                // "rank 2 never issued Send #41 to rank 3 on ...; rank 3 waits in Recv #41 from it"
                const bool send = disk::OpType(v.op.op) == disk::OpType::Send;
                s = fmt::format("{} never issued {} {} rank {} on {}; rank {} waits in {} #{} {} it{}", culprits, op,
                                send ? "to" : "from", *peer, comm, *peer, send ? "Recv" : "Send", v.seq,
                                send ? "from" : "to", since(job, v));
                break;
            }
            s = fmt::format("{} never issued {} on {}; {} in it{}", culprits, op, comm, waiters(v), since(job, v));
            break;
        case Kind::Dead:
            s = fmt::format("{} {}; {} in {} on {}{}", culprits, dead_words(c, v), waiters(v), op, comm, since(job, v));
            break;
        case Kind::Mismatch:
            if (v.pair_sizes) {
                s = pair_sizes_words(job, c, v);
                break;
            }
            if (const auto peer = p2p_peer(job, c, v); peer && v.unposted) {
                // A receive (send) left out while the rank went on into other ops: "rank 2 never posted Recv #6 from
                // rank 1 on ..., and went on into other ops; rank 1 waits in Send #6 to it"
                const bool send = disk::OpType(v.op.op) == disk::OpType::Send;
                s = fmt::format(
                    "{} never posted {} {} rank {} on {} and went on into other ops; rank {} waits in {} #{} {} it{}: "
                    "a {} no {} matches (one left out of a batch_isend_irecv, or a wrong peer?)",
                    culprits, op, send ? "to" : "from", *peer, comm, *peer, send ? "Recv" : "Send", v.seq,
                    send ? "from" : "to", since(job, v), send ? "receive" : "send", send ? "send" : "receive");
                break;
            }
            if (const auto peer = p2p_peer(job, c, v)) {
                // A send (receive) to a peer that never posted its match: "rank 2 waits in Send #1 to rank 0, which
                // has never posted a Recv from it"
                const bool send = disk::OpType(v.op.op) == disk::OpType::Send;
                s = fmt::format(
                    "{} waits in {} {} rank {} on {}, which has never posted a {} {} it: a {} no {} "
                    "matches (a wrong peer?){}",
                    culprits, op, send ? "to" : "from", *peer, comm, send ? "Recv" : "Send", send ? "from" : "to",
                    send ? "send" : "receive", send ? "receive" : "send", since(job, v));
                break;
            }
            if (const auto odd = odd_op(c, v)) {
                s = fmt::format(
                    "{} issued {} where the other ranks issued {} at #{} on {} (NCCL may complete it silently and "
                    "corrupt data)",
                    culprits, disk::op_name(*odd), disk::op_name(v.op.op), v.seq, comm);
                break;
            }
            s = fmt::format(
                "{} issued a different {} than the other ranks at #{} on {} (NCCL may complete it "
                "silently and corrupt data)",
                culprits, disk::OpType(v.op.op) == disk::OpType::None ? "op" : disk::op_name(v.op.op), v.seq, comm);
            break;
        case Kind::GpuNotReached:
            s = fmt::format("the GPU of {} has not reached {} on {} (busy with earlier work); {} in it{}", culprits, op,
                            comm, waiters(v), since(job, v));
            break;
        case Kind::StuckInNccl:
            // Only ever proven (every rank's call blocks in NCCL, or its GPU is inside the op): the one verdict that
            // points at the network path.
            s = fmt::format(
                "all {} ranks are proven inside {} on {} and none completed it{}: stuck inside NCCL; check the "
                "network path (hosts {})",
                c.view.ranks.size(), op, comm, since(job, v), hosts_of(c));
            break;
        case Kind::AsyncError: s = fmt::format("NCCL reported an error on {} in {}", culprits, comm); break;
        case Kind::ExtraOp:
            if (v.drift) {
                s = fmt::format("{} added {} on {}: {}", culprits, verdict::drift_what(*v.drift), comm,
                                verdict::drift_pairing(*v.drift));
                if (v.waiting == std::vector<int>{v.drift->rank})
                    s += fmt::format(
                        "; it waits in {}, which no other rank issued: it is ahead, the others are not "
                        "behind",
                        op);
                else if (!v.waiting.empty())
                    s += fmt::format("; {} in {}{}", waiters(v), op, since(job, v));
                break;
            }
            s = fmt::format("{} issued {} on {} that no other rank issued: it is ahead, the others are not behind",
                            culprits, op, comm);
            break;
        case Kind::InitHang:
            s = v.culprits.empty()
                    ? fmt::format("init of {} did not finish: every rank entered it, none finished", comm)
                    : fmt::format("init of {} did not finish: {} never entered or finished it", comm, culprits);
            break;
        case Kind::SettingDiffers:
            s = fmt::format("{}: {} (a setting NCCL needs every rank to agree on); {} in {} on {}{}", culprits,
                            v.setting, waiters(v), op, comm, since(job, v));
            break;
        case Kind::Deadlock:
            s = !v.cycle.empty() && disk::is_p2p(disk::OpType(v.cycle.front().op.op)) ? p2p_cycle_words(job, c, v)
                                                                                      : deadlock_words(job, c, v);
            break;
        case Kind::Failed: {
            // "torch's NCCL watchdog ended ranks 1,2,3 after AllReduce #11 on ... had waited 20.4 s for rank 0 (...)"
            const std::string ended = who(job, c, v.waiting);
            if (!v.seq) {
                s = fmt::format(
                    "torch's NCCL watchdog ended {}; no op of theirs had waited a second: an error torch's own log "
                    "names",
                    ended);
                break;
            }
            // The rank it waited for may be on another node: out of sight here, which ranks are is all that is known.
            const std::string held_by = !v.culprits.empty()
                                            ? culprits
                                            : fmt::format("a rank out of sight here (comm rank{} {} {} no rank file)",
                                                          v.missing.size() == 1 ? "" : "s", format_ranks(v.missing),
                                                          v.missing.size() == 1 ? "has" : "have");
            s = fmt::format(
                "torch's NCCL watchdog ended {} after {} on {} had waited {:.1f} s for {}: the process group's timeout "
                "{}was shorter than that wait",
                ended, op, comm, v.stalled_for_s, held_by,
                v.torch_timeout_s > 0 ? fmt::format("({:g} s) ", v.torch_timeout_s) : std::string());
            break;
        }
        case Kind::TeardownHang:
            s = fmt::format("{} {} been inside the teardown of {} for {:.1f} s{}", culprits,
                            v.culprits.size() == 1 ? "has" : "have", comm, v.stalled_for_s, since(job, v));
            break;
        case Kind::Straggler:
            // From sends and receives (a pipeline's stages), or from collectives.
            s = disk::is_p2p(disk::OpType(v.op.op))
                    ? fmt::format(
                          "{} is the slowest stage on {}: its peers consistently wait for it inside their "
                          "receives from it (not a hang)",
                          culprits, comm)
                    : fmt::format("{} is consistently last to arrive at collectives on {} (not a hang)", culprits,
                                  comm);
            break;
        case Kind::Unknown:
            if (!v.completed_it.empty()) {
                s = fmt::format(
                    "{} completed {} on {} while {} in it{}: their ops were not paired as numbered (an op outside the "
                    "numbering, or a skip or an extra op of one shape); not the transport",
                    who(job, c, v.completed_it), op, comm, waiters(v), since(job, v));
                break;
            }
            if (v.missing.empty()) {
                // Every rank in sight, none proven to hold the op up (lower-bound counts): the summary says what
                // is not known.
                s = fmt::format(
                    "{} in {} on {}{}; no rank is proven to hold it up: where their GPUs are is not known "
                    "(lower-bound counts)",
                    waiters(v), op, comm, since(job, v));
                break;
            }
            s = fmt::format("{} in {} on {}{}; the culprit is not visible: comm rank{} {} {} no rank file here",
                            waiters(v), op, comm, since(job, v), v.missing.size() == 1 ? "" : "s",
                            format_ranks(v.missing), v.missing.size() == 1 ? "has" : "have");
            break;
    }
    // Where the culprit and the waiting ranks are in their Python code (format 1.5), where their stacks are known.
    if (const std::string py = python_words(c, v); !py.empty()) s += ": " + py;
    if (v.consequence) s += fmt::format(" (a consequence, not the cause: {})", v.consequence_of);
    if (v.role == Role::Initiating && v.kind != Kind::Deadlock)
        s += " (stalled first: other communicators wait because of it)";
    if (v.role == Role::Cascade)
        s += v.caused_by_comm ? fmt::format(" (cascade: waits because of communicator {})", hex(v.caused_by_comm))
                              : std::string(" (cascade of another communicator's stall)");
    return s;
}

std::vector<std::string> verdict_lines(const JobResult& job, const CommResult& comm, const verdict::Verdict& v) {
    // A suspicion (engine/suspicion.h) says so before the kind: the same verdict, not yet a stall.
    std::vector<std::string> lines{fmt::format("{}{}: {}", v.suspected ? "SUSPECTED " : "", verdict::kind_name(v.kind),
                                               clean(verdict_headline(job, comm, v))),
                                   clean(v.summary)};
    for (const auto& e : v.evidence) lines.push_back(clean(e));
    return lines;
}

json verdict_json_with_headline(const JobResult& job, const CommResult& comm, const verdict::Verdict& v) {
    json j = verdict_json(v, job.job_id);
    j["headline"] = verdict_headline(job, comm, v);
    // Who the culprits are and where in their Python code, as judged now: after the end, analyze tells the story of
    // a stall that recovered from these (report/story.h), once the ranks have moved on.
    json where = json::array();
    const std::vector<int> global = global_ranks(job, comm, v.culprits);
    for (size_t i = 0; i < v.culprits.size(); ++i) {
        const RankCommState* r = find_rank(comm, v.culprits[i]);
        const auto w = r ? python_where(*r, &v) : std::nullopt;
        where.push_back(json{{"comm_rank", v.culprits[i]},
                             {"global_rank", global[i] >= 0 ? json(global[i]) : json(nullptr)},
                             {"python_where", w ? json(py::where_words(*w)) : json(nullptr)}});
    }
    j["culprits_where"] = std::move(where);
    return j;
}

const verdict::Verdict* culprit_verdict(const CommResult& c) {
    const verdict::Verdict* best = nullptr;
    int best_rank = 0;
    for (const auto& v : c.verdicts) {
        if (v.kind == Kind::Straggler || v.suspected || v.culprits.empty()) continue;
        const bool stall = v.kind != Kind::Mismatch && !verdict::drift_only(v);
        const int rank = (v.consequence ? 0 : 4) + (stall ? 2 : 0) + (v.role == Role::Cascade ? 0 : 1) + 1;
        if (rank > best_rank) best = &v, best_rank = rank;
    }
    return best;
}

CulpritLabels culprit_labels(const JobResult& job, const CommResult& c, const verdict::Verdict& v) {
    constexpr size_t kRanks = 8, kHosts = 4;
    CulpritLabels out;
    const size_t listed = std::min(kRanks, v.culprits.size());
    const std::vector<int> shown(v.culprits.begin(), v.culprits.begin() + std::ptrdiff_t(listed));
    const std::vector<int> global = global_ranks(job, c, shown);
    const bool all_global = std::none_of(global.begin(), global.end(), [](int g) { return g < 0; });
    out.ranks = all_global ? format_ranks(global) : "comm " + format_ranks(shown);
    if (v.culprits.size() > listed) out.ranks += fmt::format(" and {} more", v.culprits.size() - listed);
    std::vector<std::string> hosts;
    for (int cr : v.culprits) {
        const RankCommState* r = find_rank(c, cr);
        const std::string h = r && !r->host.empty() ? clean(r->host) : "?";
        if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    }
    for (size_t i = 0; i < hosts.size() && i < kHosts; ++i) out.hosts += (i ? "," : "") + hosts[i];
    if (hosts.size() > kHosts) out.hosts += fmt::format(" and {} more", hosts.size() - kHosts);
    out.op = op_words(v);
    return out;
}

bool hang_or_mismatch(const Analysis& a) {
    for (const auto& j : a.jobs)
        for (const auto& c : j.comms)
            for (const auto& v : c.verdicts)
                if (v.kind != Kind::Straggler) return true;
    return false;
}

Analysis::VerdictRef lead_verdict(const Analysis& a) {
    const auto all = a.all_verdicts();
    if (all.empty()) return {nullptr, nullptr, nullptr};
    for (const auto& ref : all)
        if (ref.verdict->role != Role::Cascade && !ref.verdict->consequence) return ref;
    for (const auto& ref : all)
        if (!ref.verdict->consequence) return ref;
    return all.front();
}

std::string headline(const Analysis& a) {
    const auto all = a.all_verdicts();
    if (all.empty()) {
        size_t ncomms = 0;
        for (const auto& j : a.jobs) ncomms += j.comms.size();
        return fmt::format("no hang and no mismatch found: {} in {}, nothing stalled",
                           plural(a.files_read, "rank file", "rank files"),
                           plural(ncomms, "communicator", "communicators"));
    }
    const auto top = lead_verdict(a);
    std::string s = verdict_headline(*top.job, *top.comm, *top.verdict);
    if (a.jobs.size() > 1)
        s = fmt::format("job {}: {}", top.job->job_id.empty() ? "(no job id)" : clean(top.job->job_id), s);
    return s;
}

}  // namespace ncw::report

// Point-to-point: sends and receives paired with what the peer posted.
#include "engine/verdict_p2p.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "engine/verdict_ranks.h"
#include "engine/verdict_text.h"
#include "ncclwatch/format.h"

namespace ncw::verdict {

using disk::OpType;

namespace {

const PeerP2p* peer_entry(const RankCommState& r, int peer) {
    for (const auto& e : r.p2p)
        if (e.peer == peer) return &e;
    return nullptr;
}

// What `p` posted toward `r` in direction `recv` (its receives from r) or not (its sends to r). Nothing when p's
// counts are unknown: not read, or its ring wrapped and holds no record of r.
std::optional<std::pair<uint64_t, uint64_t>> posted(const RankCommState& p, int r, bool recv) {
    if (!p.p2p_known) return std::nullopt;
    const PeerP2p* e = peer_entry(p, r);
    if (!e) {
        if (p.p2p_wrapped) return std::nullopt;
        return std::pair<uint64_t, uint64_t>{0, 0};
    }
    return recv ? std::pair{e->recvs_issued, e->recvs_completed} : std::pair{e->sends_issued, e->sends_completed};
}

// Every op the rank issued on the communicator is done, as far as its counts say: collectives and both directions of
// every peer. (Lower-bound counts can only make a rank look busy, never at rest.)
bool at_rest(const RankCommState& r) {
    if (r.issued > r.completed) return false;
    for (const auto& e : r.p2p)
        if (e.sends_issued > e.sends_completed || e.recvs_issued > e.recvs_completed) return false;
    return true;
}

// The first point-to-point op `p` waits in with a rank other than `besides`, as "recv #6 from rank 2"; "" when it
// waits in none. A rank that has not posted its match to a waiter because it waits on a third rank is a link of a
// chain (a pipeline stage waiting for the stage before it), not the cause: the chain's end is.
std::string waits_elsewhere(const RankCommState& p, int besides) {
    for (const auto& e : p.p2p) {
        if (e.peer == besides) continue;
        if (e.recvs_issued > e.recvs_completed)
            return fmt::format("recv #{} from rank {}", e.recvs_completed + 1, e.peer);
        if (e.sends_issued > e.sends_completed)
            return fmt::format("send #{} to rank {}", e.sends_completed + 1, e.peer);
    }
    return "";
}

// Whether `r`'s GPU is known to have started its `seq`-th send to (recv: receive from) `peer`.
// Whether either rank's ring wrapped past its p2p records: its counts per peer may then miss old traffic.
// Completed sends and receives with other ranks that make a pair never used before stand out (wrong_peer).
constexpr uint64_t kSetPatternOps = 8;

bool p2p_wrapped_either(const RankCommState& a, const RankCommState& b) { return a.p2p_wrapped || b.p2p_wrapped; }

bool reached(const RankCommState& r, int peer, bool recv, uint64_t seq) {
    const PeerP2p* e = peer_entry(r, peer);
    return e && (recv ? e->recvs_reached : e->sends_reached) >= seq;
}

// Whether every send and receive `p` has pending is served by its peer: the peer completed its side of each (its
// receives of them, its sends to them). Such ops wait on nobody; they are only still running on p's GPU (or on p's
// lower-bound records), and p, with no collective pending either, is not held by any rank: as good as at rest.
bool served(const CommView& view, const RankCommState& p) {
    if (p.issued > p.completed) return false;
    for (const auto& e : p.p2p) {
        if (e.sends_issued <= e.sends_completed && e.recvs_issued <= e.recvs_completed) continue;
        const RankCommState* q = state_of_rank(view, e.peer);
        if (!q || !q->alive) return false;
        const PeerP2p* back = peer_entry(*q, p.comm_rank);
        if (!back) return false;
        if (e.sends_issued > e.sends_completed && back->recvs_completed < e.sends_issued) return false;
        if (e.recvs_issued > e.recvs_completed && back->sends_completed < e.recvs_issued) return false;
    }
    return true;
}

// Whether `p` waits in a point-to-point op with `with` (either direction).
bool waits_with(const RankCommState& p, int with) {
    const PeerP2p* e = peer_entry(p, with);
    return e && (e->sends_issued > e->sends_completed || e->recvs_issued > e->recvs_completed);
}

// The op as a signature: a Send or Recv with its peer in `root`.
OpSig op_sig(const P2pOp& o, int peer) {
    OpSig g;
    g.seq = o.seq;
    g.count = o.count;
    g.t_issue_ns = o.t_issue_ns;
    g.op = uint8_t(o.send ? OpType::Send : OpType::Recv);
    g.dtype = o.dtype;
    g.root = peer;
    g.stream = o.stream;
    return g;
}

// "Send #10 to rank 1" / "Recv #10 from rank 0"
std::string op_words(const P2pOp& o, int peer) {
    return fmt::format("{} #{} {} rank {}", o.send ? "Send" : "Recv", o.seq, o.send ? "to" : "from", peer);
}

// Whether `r` issued the op in an NCCL group with ops to other peers (an all-to-all, batch_isend_irecv).
bool grouped_with_others(const RankCommState& r, const P2pOp& o, int peer) {
    if (o.group_id == 0) return false;
    for (const auto& e : r.p2p)
        if (e.peer != peer)
            for (const auto& x : e.ops)
                if (x.group_id == o.group_id) return true;
    return false;
}

// Whether the op still waits: issued and not done, and not failed (a failed call waits on nobody).
bool open_op(const P2pOp& o) { return !o.done() && !(o.state & P2pOp::kFailed); }

// Whether `r`'s op is done by the order of its stream though its own record does not say so (lower-bound counts: a
// completion seen only for a later op): a later op on the same stream, a send or receive or a collective, completed.
bool done_by_stream(const RankCommState& r, const P2pOp& o) {
    for (const auto& e : r.p2p)
        for (const auto& x : e.ops)
            if (x.done() && x.stream == o.stream && x.t_issue_ns > o.t_issue_ns) return true;
    for (const OpSig& g : r.recent)
        if (g.seq <= r.completed && g.stream == o.stream && g.t_issue_ns > o.t_issue_ns) return true;
    return false;
}

// Open, and not done by its stream's order either.
bool open_on(const RankCommState& r, const P2pOp& o) { return open_op(o) && !done_by_stream(r, o); }

// A rank's oldest open point-to-point op on the communicator (by issue time), with its peer: what it is held in.
std::optional<std::pair<P2pOp, int>> oldest_open(const RankCommState& r) {
    std::optional<std::pair<P2pOp, int>> out;
    for (const auto& e : r.p2p)
        for (const auto& o : e.ops)
            if ((!out || o.t_issue_ns < out->first.t_issue_ns) && open_on(r, o)) out = std::pair{o, e.peer};
    return out;
}

}  // namespace

// Every send paired with the receive of the same number at its peer (the n-th of A to B with the n-th of B from A):
// NCCL moves the receive's size and no more, so a pair that disagrees hangs the larger side (or, where the rest fits
// in NCCL's buffers, completes and corrupts the next exchange of the pair). One verdict for the communicator, naming
// the rank found in the most disagreeing pairs (the sender where they tie). `open_only`: only pairs one side of which
// still waits.
std::optional<Verdict> p2p_size_mismatch(const CommView& view, bool open_only) {
    struct Pair {
        const RankCommState* sender;
        const RankCommState* receiver;
        P2pOp send, recv;
    };
    std::vector<Pair> pairs;
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known) continue;
        for (const auto& e : r.p2p) {
            const RankCommState* p = state_of_rank(view, e.peer);
            const PeerP2p* back = p && p->p2p_known ? peer_entry(*p, r.comm_rank) : nullptr;
            if (!back) continue;
            for (const auto& o : e.ops) {
                if (!o.send) continue;
                const P2pOp* m = back->op(false, o.seq);
                if (!m || !o.bytes() || !m->bytes() || o.bytes() == m->bytes()) continue;
                if (open_only && !open_op(o) && !open_op(*m)) continue;
                pairs.push_back({&r, p, o, *m});
            }
        }
    }
    if (pairs.empty()) return std::nullopt;
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const Pair& a, const Pair& b) { return a.send.t_issue_ns < b.send.t_issue_ns; });
    std::map<int, size_t> in_pairs;
    for (const auto& pr : pairs) ++in_pairs[pr.sender->comm_rank], ++in_pairs[pr.receiver->comm_rank];
    int culprit = pairs.front().sender->comm_rank;
    for (const auto& [rank, n] : in_pairs)
        if (n > in_pairs[culprit]) culprit = rank;
    // The first pair the culprit is in leads the words.
    const Pair& lead = *std::find_if(pairs.begin(), pairs.end(), [&](const Pair& pr) {
        return pr.sender->comm_rank == culprit || pr.receiver->comm_rank == culprit;
    });
    Verdict v;
    v.kind = Kind::Mismatch;
    v.comm_id = view.comm_id;
    v.seq = lead.send.seq;
    v.culprits = {culprit};
    v.missing = missing_ranks(view);
    v.op = op_sig(lead.send, lead.receiver->comm_rank);
    Verdict::PairSizes ps;
    ps.sender = lead.sender->comm_rank;
    ps.receiver = lead.receiver->comm_rank;
    ps.send = v.op;
    ps.recv = op_sig(lead.recv, lead.sender->comm_rank);
    ps.grouped = grouped_with_others(*lead.sender, lead.send, ps.receiver) &&
                 grouped_with_others(*lead.receiver, lead.recv, ps.sender);
    ps.pairs = pairs.size();
    v.pair_sizes = ps;
    v.summary = fmt::format(
        "comm {}: p2p: rank {}'s {} carries {} bytes ({} {}), rank {}'s {} expects {} bytes ({} {}): a send and "
        "its receive disagree in size{}",
        hex_comm(view.comm_id), ps.sender, op_words(lead.send, ps.receiver), lead.send.bytes(), lead.send.count,
        disk::dtype_name(lead.send.dtype), ps.receiver, op_words(lead.recv, ps.sender), lead.recv.bytes(),
        lead.recv.count, disk::dtype_name(lead.recv.dtype),
        pairs.size() > 1
            ? fmt::format("; {} pairs disagree, rank {} in {} of them", pairs.size(), culprit, in_pairs[culprit])
            : "");
    for (const auto& pr : pairs)
        v.evidence.push_back(fmt::format("p2p: {}: {} ({} bytes, {}); {}: {} ({} bytes, {})", rank_id(*pr.sender),
                                         op_words(pr.send, pr.receiver->comm_rank), pr.send.bytes(),
                                         open_op(pr.send) ? "waiting" : "completed", rank_id(*pr.receiver),
                                         op_words(pr.recv, pr.sender->comm_rank), pr.recv.bytes(),
                                         open_op(pr.recv) ? "waiting" : "completed"));
    return v;
}

// A cycle of point-to-point waits: each rank of it waits in its oldest open send or receive for a peer whose match
// cannot run, because it is queued behind the peer's own open op on the same stream (outside its group), or because
// the peer has not posted it and is blocked inside the call of its own open op; and that op in turn waits on the
// next rank of the cycle. Two ranks that both send first and then receive, each on one stream, are the classic one.
std::optional<Verdict> p2p_cycle(const CommView& view, uint64_t now_ns, double timeout_s) {
    struct Hold {
        P2pOp op;
        int peer = -1;
        bool match_posted = false;
    };
    // next[r]: the rank r waits on, and why, where its wait cannot be served.
    std::map<int, Hold> next;
    double oldest = 0;
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known || !r.alive) continue;
        const auto held = oldest_open(r);
        if (!held) continue;
        const auto& [o, peer] = *held;
        const RankCommState* p = state_of_rank(view, peer);
        const PeerP2p* back = p && p->p2p_known && p->alive ? peer_entry(*p, r.comm_rank) : nullptr;
        const auto p_held = p ? oldest_open(*p) : std::nullopt;
        if (!back || !p_held ||
            (p_held->second == r.comm_rank && bool(p_held->first.send) == !o.send && p_held->first.seq == o.seq))
            continue;  // the peer's oldest open op is this one's match: it runs
        const P2pOp* m = back->op(!o.send, o.seq);
        const P2pOp& x = p_held->first;
        bool blocked = false;
        if (m && open_on(*p, *m))  // posted, queued behind x on the same stream, outside x's group
            blocked =
                x.stream == m->stream && x.t_issue_ns < m->t_issue_ns && (x.group_id == 0 || x.group_id != m->group_id);
        else if (!m && o.seq > (o.send ? back->recvs_issued : back->sends_issued))  // not posted: blocked in x's call
            blocked = !(x.state & P2pOp::kReturned) && x.group_id == 0;
        if (!blocked) continue;
        next[r.comm_rank] = Hold{o, peer, m != nullptr};
        oldest = std::max(oldest, age_s(now_ns, o.t_issue_ns));
    }
    if (next.empty() || oldest < timeout_s) return std::nullopt;
    for (const auto& [start, h0] : next) {
        std::vector<int> path{start};
        int at = h0.peer;
        while (next.count(at) && std::find(path.begin(), path.end(), at) == path.end()) {
            path.push_back(at);
            at = next[at].peer;
        }
        if (at != start || path.size() < 2) continue;
        Verdict v;
        v.kind = Kind::Deadlock;
        v.comm_id = view.comm_id;
        v.missing = missing_ranks(view);
        v.culprits = path;
        std::sort(v.culprits.begin(), v.culprits.end());
        v.waiting = v.culprits;
        const Hold& first = next[path.front()];
        v.op = op_sig(first.op, first.peer);
        v.seq = first.op.seq;
        v.stalled_for_s = oldest;
        std::string links;
        for (size_t k = 0; k < path.size(); ++k) {
            const Hold& h = next[path[k]];
            const Hold& theirs = next[h.peer];
            Verdict::CycleLink link;
            link.comm_id = view.comm_id;
            link.seq = h.op.seq;
            link.op = op_sig(h.op, h.peer);
            link.waiting = {path[k]};
            const RankCommState* me = state_of_rank(view, path[k]);
            const RankCommState* them = state_of_rank(view, h.peer);
            link.waiting_global = {me ? me->global_rank : -1};
            link.for_global = {them && them->global_rank >= 0 ? them->global_rank : h.peer};
            link.match_posted = h.match_posted;
            link.behind = op_sig(theirs.op, theirs.peer);
            v.cycle.push_back(link);
            links += fmt::format("{}rank {} waits {} in {}, whose {} #{} {} rank {} {} its own {}", k ? "; " : "",
                                 path[k], secs(age_s(now_ns, h.op.t_issue_ns)), op_words(h.op, h.peer),
                                 h.op.send ? "Recv" : "Send", h.op.seq, h.op.send ? "from" : "to", path[k],
                                 h.match_posted ? "is queued behind"
                                                : "is not posted: rank " + std::to_string(h.peer) + " is blocked in",
                                 op_words(theirs.op, theirs.peer));
        }
        v.summary = fmt::format("comm {}: p2p: {} wait on each other: {}", hex_comm(view.comm_id),
                                ranks_word(v.culprits), links);
        v.evidence.push_back(
            "p2p: NCCL runs a stream's ops in the order they were issued, and a send completes only once its receive "
            "runs: issue the Recv first on one side, or post both in one group (batch_isend_irecv)");
        return v;
    }
    return std::nullopt;
}

bool p2p_wait_maturing(const CommView& view, uint64_t now_ns, double timeout_s, double stalled_for_s) {
    if (timeout_s <= 0) return false;
    for (const auto& r : view.ranks) {
        if (!r.p2p_known || !r.alive) continue;
        const auto held = oldest_open(r);
        if (!held) continue;
        const double age = age_s(now_ns, held->first.t_issue_ns);
        if (age < timeout_s && stalled_for_s - age <= timeout_s) return true;
    }
    return false;
}

// What holds a stalled communicator's ranks in its sends and receives before anything else: a pair whose sizes
// disagree (one side still waiting), or a cycle of waits.
std::vector<Verdict> p2p_blockers(const CommView& view, uint64_t now_ns, double timeout_s) {
    std::vector<Verdict> out;
    if (auto v = p2p_cycle(view, now_ns, timeout_s)) out.push_back(std::move(*v));
    if (auto v = p2p_size_mismatch(view, true)) out.push_back(std::move(*v));
    return out;
}

namespace {

// Whether a rank will post nothing more on the communicator: its counts there are final.
bool done_with_comm(const RankCommState& r) {
    switch (disk::CommState(r.comm_state)) {
        case disk::CommState::Finalized:
        case disk::CommState::Destroyed:
        case disk::CommState::Aborted:
        case disk::CommState::Revoked: return true;
        default: return !r.alive || r.exited_clean;
    }
}

}  // namespace

// Sends whose receive the peer never posted, where the peer is done with the communicator and will post none. A send
// completes once its data is in the connection's buffers (NCCL's staging buffer, a socket's), before the peer posts
// its receive: while the peer still runs, fewer receives than completed sends is a stage still computing (measured:
// a pipeline's last stage 2 sends ahead of the slow one before it), and diagnose_stall judges the waits.
std::vector<Verdict> p2p_mismatches(const CommView& view) {
    std::vector<Verdict> out;
    if (auto v = p2p_size_mismatch(view, false)) out.push_back(std::move(*v));
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known) continue;
        for (const auto& e : r.p2p) {
            if (e.sends_issued == 0 || e.sends_issued != e.sends_completed) continue;
            const RankCommState* p = state_of_rank(view, e.peer);
            if (!p || !done_with_comm(*p)) continue;
            // The peer's counts must be at least as new as this rank's completion of the send: older ones (the live
            // collector's last State of it, a second apart) say nothing of a receive posted since.
            if (p->p2p_as_of_ns && r.t_last_progress_ns > p->p2p_as_of_ns) continue;
            const auto got = posted(*p, r.comm_rank, true);
            if (!got || got->first >= e.sends_issued || got->first != got->second) continue;
            Verdict v;
            v.kind = Kind::Mismatch;
            v.comm_id = view.comm_id;
            v.seq = got->first + 1;
            v.culprits = {p->comm_rank};
            v.missing = missing_ranks(view);
            v.op.op = uint8_t(OpType::Recv);
            v.op.seq = got->first + 1;
            v.summary = fmt::format(
                "comm {}: p2p: rank {} completed {} send{} to rank {}, but rank {} posted only {} receive{} from rank "
                "{}: unmatched send/recv pair",
                hex_comm(view.comm_id), r.comm_rank, e.sends_issued, e.sends_issued == 1 ? "" : "s", p->comm_rank,
                p->comm_rank, got->first, got->first == 1 ? "" : "s", r.comm_rank);
            v.evidence.push_back(fmt::format("p2p: {}: sends to rank {}: issued {}, completed {}", rank_id(r),
                                             p->comm_rank, e.sends_issued, e.sends_completed));
            v.evidence.push_back(fmt::format("p2p: {}: receives from rank {}: issued {}, completed {}", rank_id(*p),
                                             r.comm_rank, got->first, got->second));
            out.push_back(std::move(v));
        }
    }
    return out;
}

// Only sends/receives are outstanding past the timeout: pair each pending one with what its peer posted.
bool open_p2p_before(const RankCommState& r, uint64_t stream, uint64_t t_ns) {
    for (const auto& e : r.p2p)
        for (const auto& o : e.ops)
            if (open_op(o) && o.stream == stream && o.t_issue_ns < t_ns) return true;
    return false;
}

std::vector<Verdict> diagnose_p2p_stall(const CommView& view, uint64_t now_ns, double timeout_s, bool with_blockers) {
    struct Pending {
        const RankCommState* r;
        int peer;
        bool recv;
        uint64_t seq;  // the oldest pending one in this direction
        double waited;
    };
    // Every wait (`all`), and those past the timeout (`pending`): a stall needs one of these; the chain it leads
    // into may end in a wait that began later (a wrong peer's send, after the receive that waits on it).
    std::vector<Pending> pending, all;
    for (size_t i : by_comm_rank(view)) {
        const auto& r = view.ranks[i];
        if (!r.p2p_known || !r.alive) continue;
        for (const auto& e : r.p2p) {
            if (e.sends_issued > e.sends_completed && e.t_oldest_send_pending_ns)
                all.push_back({&r, e.peer, false, e.sends_completed + 1, age_s(now_ns, e.t_oldest_send_pending_ns)});
            if (e.recvs_issued > e.recvs_completed && e.t_oldest_recv_pending_ns)
                all.push_back({&r, e.peer, true, e.recvs_completed + 1, age_s(now_ns, e.t_oldest_recv_pending_ns)});
        }
    }
    for (const auto& w : all)
        if (w.waited >= timeout_s) pending.push_back(w);
    if (pending.empty()) return {};
    // A cycle of waits, or a pair whose sizes disagree, holds them before anything a count can say.
    if (auto blockers = with_blockers ? p2p_blockers(view, now_ns, timeout_s) : std::vector<Verdict>{};
        !blockers.empty()) {
        for (auto& b : blockers) {
            for (const auto& w : all) b.waiting.push_back(w.r->comm_rank);
            std::sort(b.waiting.begin(), b.waiting.end());
            b.waiting.erase(std::unique(b.waiting.begin(), b.waiting.end()), b.waiting.end());
            for (const auto& w : pending) b.stalled_for_s = std::max(b.stalled_for_s, w.waited);
        }
        return blockers;
    }

    std::vector<int> unmatched, dead, unseen, waiting, uncounted, resting, chained;
    std::vector<std::string> unmatched_ev, matched_ev;
    std::vector<const Pending*> unmatched_pd;  // the waits whose peer posted no match
    std::string what;
    double stalled_for = 0;
    const Pending* first = &pending.front();
    for (const auto& pd : pending) {
        stalled_for = std::max(stalled_for, pd.waited);
        if (pd.waited >= first->waited) first = &pd;
        waiting.push_back(pd.r->comm_rank);
        const char* dir = pd.recv ? "recv" : "send";
        const char* prep = pd.recv ? "from" : "to";
        const std::string head = fmt::format("rank {} waits {} in {} #{} {} rank {}", pd.r->comm_rank, secs(pd.waited),
                                             dir, pd.seq, prep, pd.peer);
        const RankCommState* p = state_of_rank(view, pd.peer);
        if (!p) {
            unseen.push_back(pd.peer);
            matched_ev.push_back(fmt::format("p2p: {}; rank {} is not visible from here", head, pd.peer));
            continue;
        }
        const auto got = posted(*p, pd.r->comm_rank, !pd.recv);
        if (!got) {
            uncounted.push_back(pd.peer);
            matched_ev.push_back(fmt::format("p2p: {}; rank {}'s counts are unknown", head, pd.peer));
            continue;
        }
        const char* other = pd.recv ? "send" : "receive";
        const char* other_prep = pd.recv ? "to" : "from";
        if (got->first < pd.seq) {
            // Still inside an earlier one of the pair: in order, unless every op the peer has open is served (then
            // they only run on its GPU, it waits on nobody, and it never posted this one).
            const bool other_waits = got->first > got->second && !served(view, *p);
            // Alive, inside nothing with this rank but waiting on a third: a link of a chain. Its own wait is judged
            // as one of the pending ones (or is not yet past the timeout); it is not the cause.
            if (!other_waits && p->alive && !waits_with(*p, pd.r->comm_rank)) {
                const std::string there = waits_elsewhere(*p, pd.r->comm_rank);
                if (!there.empty()) {
                    chained.push_back(pd.peer);
                    matched_ev.push_back(fmt::format("p2p: {}; rank {} posted only {} {}{} {} rank {}: it waits in {}",
                                                     head, pd.peer, got->first, other, got->first == 1 ? "" : "s",
                                                     other_prep, pd.r->comm_rank, there));
                    continue;
                }
            }
            std::string line = fmt::format("{}, but rank {} posted only {} {}{} {} rank {}", head, pd.peer, got->first,
                                           other, got->first == 1 ? "" : "s", other_prep, pd.r->comm_rank);
            if (!p->alive) {
                line += " and is DEAD";
                dead.push_back(pd.peer);
            } else if (!other_waits) {
                line += fmt::format(" and waits in none {} it", other_prep);
            }
            if (!other_waits || !p->alive) {
                unmatched.push_back(pd.peer);
                unmatched_pd.push_back(&pd);
                if (p->alive && (at_rest(*p) || served(view, *p))) resting.push_back(pd.peer);
                what += (what.empty() ? "" : "; ") + line;
                unmatched_ev.push_back("p2p: " + line);
            }
        } else {
            matched_ev.push_back(fmt::format("p2p: {}; rank {} posted the matching {} (issued {}, completed {})", head,
                                             pd.peer, other, got->first, got->second));
        }
    }
    auto uniq = [](std::vector<int>& v) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
    };
    uniq(unmatched), uniq(dead), uniq(unseen), uniq(waiting), uniq(uncounted), uniq(resting), uniq(chained);

    Verdict base;
    base.comm_id = view.comm_id;
    base.seq = first->seq;
    base.op.seq = first->seq;
    base.op.op = uint8_t(first->recv ? OpType::Recv : OpType::Send);
    base.waiting = waiting;
    base.missing = missing_ranks(view);
    base.stalled_for_s = stalled_for;
    std::vector<Verdict> out;
    // A wait on a peer that never exchanged anything with this rank in that direction, its first op of the pair,
    // while both have traffic with other ranks: the pattern of the run is set, and this pair is not in it (a send to
    // a wrong peer index). The others' waits lead to it in turn.
    for (const auto& pd : all) {
        const RankCommState* p = state_of_rank(view, pd.peer);
        const auto got = p ? posted(*p, pd.r->comm_rank, !pd.recv) : std::nullopt;
        // The pattern is set once both have completed a few steps' sends and receives with other ranks (not a
        // pipeline's first step, where a stage's first receive from the next one is still to come).
        auto has_other_traffic = [](const RankCommState& x, int besides) {
            uint64_t done = 0;
            for (const auto& e : x.p2p)
                if (e.peer != besides) done += e.sends_completed + e.recvs_completed;
            return done >= kSetPatternOps;
        };
        if (!p || !p->alive || !got || got->first != 0 || pd.seq != 1 || p2p_wrapped_either(*pd.r, *p) ||
            !has_other_traffic(*pd.r, pd.peer) || !has_other_traffic(*p, pd.r->comm_rank))
            continue;
        Verdict v = base;
        v.kind = Kind::Mismatch;
        v.culprits = {pd.r->comm_rank};
        v.stalled_for_s = pd.waited;  // since its own wait began, not the oldest wait of the chain
        v.seq = v.op.seq = 1;
        v.op.op = uint8_t(pd.recv ? OpType::Recv : OpType::Send);
        v.op.root = pd.peer;
        const std::string there = waits_elsewhere(*p, pd.r->comm_rank);
        v.summary = fmt::format(
            "comm {}: p2p: rank {} waits {} in {} #1 {} rank {}, its first ever {} rank {}, and rank {} has never "
            "posted a {} {} rank {}{}: a {} that no {} matches (a wrong peer?)",
            hex_comm(view.comm_id), pd.r->comm_rank, secs(pd.waited), pd.recv ? "recv" : "send",
            pd.recv ? "from" : "to", pd.peer, pd.recv ? "from" : "to", pd.peer, pd.peer, pd.recv ? "send" : "receive",
            pd.recv ? "to" : "from", pd.r->comm_rank, there.empty() ? "" : fmt::format(" (it waits in {})", there),
            pd.recv ? "receive" : "send", pd.recv ? "send" : "receive");
        std::string on_it;  // the waits on the culprit itself, which it cannot serve while it waits there
        for (const auto& w : all)
            if (w.peer == pd.r->comm_rank)
                on_it += fmt::format("{}rank {} in {} #{} {} it", on_it.empty() ? "" : ", ", w.r->comm_rank,
                                     w.recv ? "recv" : "send", w.seq, w.recv ? "from" : "to");
        if (!on_it.empty()) v.summary += "; waiting on rank " + std::to_string(pd.r->comm_rank) + ": " + on_it;
        v.evidence.push_back(
            fmt::format("p2p: {} has exchanged sends and receives with other ranks, and so has rank "
                        "{}; never with each other in this direction before",
                        rank_id(*pd.r), pd.peer));
        v.evidence.insert(v.evidence.end(), unmatched_ev.begin(), unmatched_ev.end());
        v.evidence.insert(v.evidence.end(), matched_ev.begin(), matched_ev.end());
        out.push_back(std::move(v));
        return out;
    }
    if (!unmatched.empty()) {
        Verdict v = base;
        // Dead; or at rest on this communicator (every op it issued there done: not inside NCCL but in the user's
        // code before the matching op, as a pipeline stage still computing): it has not joined, and those waiting
        // on it wait because of it; or every unmatched peer inside other ops of it: the pairs differ.
        v.kind = !dead.empty() ? Kind::Dead : !resting.empty() ? Kind::NotJoined : Kind::Mismatch;
        v.culprits = v.kind == Kind::NotJoined ? resting : unmatched;
        // The op the culprit has not issued: the match of the longest wait on it.
        if (v.kind == Kind::NotJoined || v.kind == Kind::Mismatch) {
            const int culprit = v.culprits.front();
            const Pending* on = nullptr;
            for (const Pending* pd : unmatched_pd)
                if (pd->peer == culprit && (!on || pd->waited > on->waited)) on = pd;
            if (on) v.seq = v.op.seq = on->seq;
            v.op.op = uint8_t((on ? on->recv : first->recv) ? OpType::Send : OpType::Recv);
            if (on) v.op.root = on->r->comm_rank;  // the peer it has not posted its match to (the waiting rank)
            v.unposted = on != nullptr;
        }
        v.summary = fmt::format("comm {}: p2p: {}: unmatched send/recv pair", hex_comm(view.comm_id), what);
        v.evidence = unmatched_ev;
        v.evidence.insert(v.evidence.end(), matched_ev.begin(), matched_ev.end());
        out.push_back(std::move(v));
        return out;
    }
    Verdict v = base;
    v.evidence = matched_ev;
    if (!unseen.empty()) {
        v.kind = Kind::Unknown;
        v.culprits = unseen;
        v.summary = fmt::format("comm {}: p2p: {} wait{} in send/recv for {}; {} {} not visible from here",
                                hex_comm(view.comm_id), ranks_word(waiting), waiting.size() == 1 ? "s" : "",
                                secs(stalled_for), ranks_word(unseen), unseen.size() == 1 ? "is" : "are");
    } else {
        // Proven inside only where the counts are exact (the call's return without GPU tracking, NCCL's profiler):
        // a lower-bound "completed" may lag a send or receive that is done.
        std::vector<int> bounded, unreached;
        for (const auto& pd : pending)
            if (!exact_p2p_counts(*pd.r)) bounded.push_back(pd.r->comm_rank);
        // Inside NCCL on both sides only where their GPUs started the op and its match: one queued behind other work
        // on its GPU (a pipeline's compute on a shared GPU) is not stuck in NCCL.
        for (const auto& pd : pending) {
            if (!reached(*pd.r, pd.peer, pd.recv, pd.seq)) unreached.push_back(pd.r->comm_rank);
            const RankCommState* p = state_of_rank(view, pd.peer);
            if (p && !reached(*p, pd.r->comm_rank, !pd.recv, pd.seq)) unreached.push_back(pd.peer);
        }
        uniq(bounded), uniq(unreached);
        const std::string head = fmt::format("comm {}: p2p: {} wait{} in send/recv for {}", hex_comm(view.comm_id),
                                             ranks_word(waiting), waiting.size() == 1 ? "s" : "", secs(stalled_for));
        if (!chained.empty() && uncounted.empty()) {
            // Every wait leads to a rank that waits on another whose own wait is not judged yet.
            v.kind = Kind::Unknown;
            v.summary = head + fmt::format(
                                   "; {} wait{} on other ranks in turn, and where that ends is not past the "
                                   "timeout yet; no rank is proven to hold it up",
                                   ranks_word(chained), chained.size() == 1 ? "s" : "");
        } else if (bounded.empty() && uncounted.empty() && unreached.empty()) {
            v.kind = Kind::StuckInNccl;
            v.summary = head + "; every pending op's peer posted its match: stuck inside NCCL (transport?)";
        } else {
            v.kind = Kind::Unknown;
            v.summary = head;
            if (!uncounted.empty())
                v.summary += fmt::format("; whether {} posted the matching ops is not known (no p2p counts)",
                                         ranks_word(uncounted));
            if (!bounded.empty())
                v.summary += fmt::format(
                    "; whether the pending ops of {} finished is not known: {} counts are lower "
                    "bounds ({})",
                    ranks_word(bounded), bounded.size() == 1 ? "its" : "their",
                    bounds_basis(*state_of_rank(view, bounded.front())));
            if (!unreached.empty())
                v.summary += fmt::format(
                    "; the GPU{} of {} {} not shown to have started the pending ops or their "
                    "matches",
                    unreached.size() == 1 ? "" : "s", ranks_word(unreached), unreached.size() == 1 ? "is" : "are");
            v.summary += "; no rank is proven to hold it up";
        }
    }
    out.push_back(std::move(v));
    return out;
}

}  // namespace ncw::verdict

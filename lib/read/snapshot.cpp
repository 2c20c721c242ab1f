// Snapshots of rank files (read/snapshot.h): the header and comm slots, and on request what the ring says about
// point-to-point traffic, the collectives before the signature window and their GPU times (read/gpu_spans.h).
#include "read/snapshot.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "ncclwatch/format.h"
#include "read/gpu_spans.h"
#include "read/text.h"

namespace ncw {

namespace {

// 1.3: a communicator that found every comm slot held by a live one (more than max_comms alive) has its records in
// the ring only (comm_slot 0xffff), each with the writer's rank and size: its progress block is rebuilt from them, as
// far back as the ring reaches, so that its stall is seen too; a warning says so.
void read_unslotted(const RankFile& file, FileSnapshot& s) {
    if (s.header.max_comms == 0 || s.header.num_comms < s.header.max_comms) return;  // the table never filled
    const RecordSet set = file.records();
    std::vector<CommInfo> found;
    auto known = [&](uint64_t id) {
        for (const auto& c : s.comms)
            if (c.comm_id == id) return true;
        return false;
    };
    for (const auto& r : set.records) {
        if (r.comm_slot != 0xffff || r.comm_id == 0 || known(r.comm_id)) continue;
        const auto op = disk::OpType(r.op);
        const bool init =
            op == disk::OpType::CommInit || op == disk::OpType::CommSplit || op == disk::OpType::CommShrink;
        // An init event is written at the init's start (result -1); a split without a color writes one with its
        // result and its parent's identity, for a communicator that never exists.
        if (init && r.result != -1) continue;
        auto c = std::find_if(found.begin(), found.end(), [&](const CommInfo& x) { return x.comm_id == r.comm_id; });
        if (c == found.end()) {
            CommInfo n;
            n.slot = 0xffff;
            n.comm_id = r.comm_id;
            n.state = uint32_t(disk::CommState::Active);
            c = found.insert(found.end(), n);
        }
        if (r.comm_nranks) {
            c->nranks = r.comm_nranks;
            c->rank = r.comm_rank;
        }
        const bool untracked = r.flags & (disk::kFlagUntracked | disk::kFlagCaptured);
        const bool done = !record_failed(r) && (r.t_done_ns != 0 || (untracked && r.t_return_ns != 0));
        if (init) {
            c->t_init_start_ns = r.t_issue_ns;
            c->t_init_done_ns = r.t_return_ns;
        } else if (op == disk::OpType::CommDestroy || op == disk::OpType::CommAbort) {
            c->state =
                uint32_t(op == disk::OpType::CommDestroy ? disk::CommState::Destroyed : disk::CommState::Aborted);
        } else if (disk::is_collective(op) || disk::is_p2p(op)) {
            // The init's event may be gone from the ring: its first op then stands for it.
            if (!c->t_init_done_ns) c->t_init_start_ns = c->t_init_done_ns = r.t_issue_ns;
            ++c->ops_issued;
            if (done) ++c->ops_completed;
            if (record_failed(r) && !c->ops_failed++) {
                c->first_failed_seq = disk::is_p2p(op) ? 0 : r.seq;
                c->first_failed_result = r.result;
                c->t_first_failed_ns = r.t_return_ns;
            }
            c->t_last_issue_ns = std::max(c->t_last_issue_ns, r.t_issue_ns);
            if (done) c->t_last_progress_ns = std::max({c->t_last_progress_ns, r.t_done_ns, r.t_return_ns});
            // Without events an op is flagged untracked once its call returned: the ones that returned say.
            if (r.t_return_ns && !untracked) c->gpu_tracking = 1;
            if (disk::is_p2p(op)) {
                ++(op == disk::OpType::Send ? c->p2p_sends : c->p2p_recvs);
                continue;
            }
            c->coll_issued = std::max(c->coll_issued, r.seq);
            if (r.t_return_ns) c->coll_returned = std::max(c->coll_returned, r.seq);
            if (r.t_reached_ns || done) c->coll_reached = std::max(c->coll_reached, r.seq);
            if (done) c->coll_completed = std::max(c->coll_completed, r.seq);
            SigInfo g;
            g.seq = r.seq;
            g.count = r.count;
            g.t_issue_ns = r.t_issue_ns;
            g.op = r.op;
            g.dtype = r.dtype;
            g.flags = r.flags;
            g.redop = r.redop;
            g.root = disk::is_rooted(op) ? r.peer_or_root : -1;
            g.tid = r.tid;
            g.stream = r.stream;
            auto& recent = c->recent.mut();
            recent.push_back(g);
            if (recent.size() > 2 * disk::kRecentSigs)  // the newest window is enough
                recent.erase(recent.begin(), recent.begin() + disk::kRecentSigs);
        }
    }
    const uint64_t in_ring = found.size();
    for (auto& c : found) {
        s.warnings.push_back("communicator " + text::hex(c.comm_id) + " had no comm slot (more than " +
                             std::to_string(s.header.max_comms) +
                             " communicators alive at once): its progress is read from the ring only");
        s.comms.push_back(std::move(c));
    }
    // The writer counts them (FileHeader::comms_unslotted): those whose records the ring no longer holds are named by
    // their number, never passed over in silence.
    if (s.header.comms_unslotted > in_ring)
        s.warnings.push_back(std::to_string(s.header.comms_unslotted) + " communicators had no comm slot (more than " +
                             std::to_string(s.header.max_comms) + " alive at once); " +
                             std::to_string(s.header.comms_unslotted - in_ring) +
                             " of them left no record in the ring: their progress is not in this file");
}

// The collectives before the signature window, from the newest `history` ring records (kHistoryRecords, snapshot.h).
void read_history(const RankFile& file, FileSnapshot& s, uint64_t history) {
    if (s.comms.empty()) return;
    const uint64_t ticket = s.header.write_ticket;
    const RecordSet set = file.records(ticket > history ? ticket - history : 0);
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
        auto& recent = c.recent.mut();
        recent.insert(recent.begin(), older.begin(), older.end());
    }
}

}  // namespace

uint64_t last_seen(const FileSnapshot& f) noexcept {
    uint64_t t = std::max({f.header.heartbeat_mono_ns, f.header.start_mono_ns, f.header.end_mono_ns});
    for (const auto& c : f.comms) t = std::max({t, c.t_last_issue_ns, c.t_last_progress_ns, c.t_first_failed_ns});
    return t;
}

// Per (comm, peer): the highest send/recv seq issued, reached and completed, and the oldest pending one's issue time.
// p2p seqs count per (comm, peer, direction) and complete in order, so the highest seq is the count even after the ring
// wrapped. Only files whose comm slots show p2p traffic pay for reading the ring.
void read_p2p(const RankFile& file, FileSnapshot& s) {
    std::vector<uint64_t> comm_ids, untracked;
    for (const auto& c : s.comms)
        if (c.p2p_sends || c.p2p_recvs) {
            comm_ids.push_back(c.comm_id);
            if (!c.gpu_tracking) untracked.push_back(c.comm_id);
        }
    s.p2p_read = true;
    s.p2p_as_of_ns = s.header.heartbeat_mono_ns;  // read before the ring: the counts are at least this new
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
        // A call that returned an error failed: never completed (files before 1.5 stamped it done).
        if (record_failed(r)) return false;
        // Without GPU tracking, completion means the call returned (as for collectives).
        return r.t_done_ns != 0 || ((r.flags & (disk::kFlagUntracked | disk::kFlagCaptured)) && r.t_return_ns != 0);
    };
    // Whether the comm's completions come from the GPU (else its ops are done once their calls return).
    auto tracked = [&](uint64_t comm_id) {
        return std::find(untracked.begin(), untracked.end(), comm_id) == untracked.end();
    };
    auto is_p2p_of_interest = [&](const Record& r) {
        return disk::is_p2p(disk::OpType(r.op)) && r.peer_or_root >= 0 &&
               std::find(comm_ids.begin(), comm_ids.end(), r.comm_id) != comm_ids.end();
    };
    for (const auto& r : set.records) {
        if (!is_p2p_of_interest(r)) continue;
        auto& e = entry(r.comm_id, r.peer_or_root);
        const bool send = disk::OpType(r.op) == disk::OpType::Send;
        const bool gpu_tracked = tracked(r.comm_id);
        auto& issued = send ? e.sends_issued : e.recvs_issued;
        auto& reached = send ? e.sends_reached : e.recvs_reached;
        auto& completed = send ? e.sends_completed : e.recvs_completed;
        issued = std::max(issued, r.seq);
        if (done(r)) completed = std::max(completed, r.seq);
        // Its GPU started it (a GPU start stamp), or it is done. Without GPU tracking, entering the call is as far as
        // anything is known: reached = issued there, as for collectives.
        if (r.t_reached_ns != 0 || done(r) || !gpu_tracked) reached = std::max(reached, r.seq);
    }
    // The newest kP2pOpWindow of each direction per peer, oldest first (the ring is in ticket order: a pair's seqs
    // rise with it); and the GPU times of the newest kP2pGpuSamples timed ones, for their medians.
    std::map<std::tuple<uint64_t, int, bool>, std::vector<uint64_t>> gpu_ns;
    for (auto it = set.records.rbegin(); it != set.records.rend(); ++it) {
        const Record& r = *it;
        if (!is_p2p_of_interest(r)) continue;
        auto& e = entry(r.comm_id, r.peer_or_root);
        const bool send = disk::OpType(r.op) == disk::OpType::Send;
        if ((r.flags & disk::kFlagGpuTimed) && r.t_reached_ns && r.t_done_ns >= r.t_reached_ns) {
            auto& times = gpu_ns[{r.comm_id, r.peer_or_root, send}];
            if (times.size() < verdict::kP2pGpuSamples) times.push_back(r.t_done_ns - r.t_reached_ns);
        }
        if (size_t(std::count_if(e.ops.begin(), e.ops.end(), [&](const auto& o) { return bool(o.send) == send; })) >=
                verdict::kP2pOpWindow ||
            e.op(send, r.seq))
            continue;
        verdict::P2pOp o;
        o.seq = r.seq;
        o.count = r.count;
        o.stream = r.stream;
        o.t_issue_ns = r.t_issue_ns;
        o.group_id = r.group_id;
        o.dtype = r.dtype;
        o.send = send;
        const bool no_gpu = !tracked(r.comm_id);
        o.state = uint8_t((r.result != -1 ? verdict::P2pOp::kReturned : 0) |
                          (r.t_reached_ns != 0 || done(r) || no_gpu ? verdict::P2pOp::kReached : 0) |
                          (r.seq <= (send ? e.sends_completed : e.recvs_completed) ? verdict::P2pOp::kDone : 0) |
                          (record_failed(r) ? verdict::P2pOp::kFailed : 0));
        e.ops.insert(e.ops.begin(), o);
    }
    for (auto& [key, times] : gpu_ns) {
        const auto& [comm_id, peer, send] = key;
        auto& e = entry(comm_id, peer);
        std::sort(times.begin(), times.end());
        const size_t n = times.size();
        (send ? e.sends_gpu_ns : e.recvs_gpu_ns) = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
        (send ? e.sends_gpu_timed : e.recvs_gpu_timed) = n;
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

FileSnapshot snapshot(const RankFile& file, bool with_p2p, uint64_t history_records) noexcept {
    FileSnapshot s;
    try {
        s.path = file.path();
        if (!file.is_open()) {
            s.error = file.error().empty() ? "not open" : file.error();
            return s;
        }
        s.ok = true;
        s.warnings = file.warnings();
        // The ring's tail too when it is read below: on a cold cache its read then overlaps the comm slots'.
        if (with_p2p) file.prefetch(history_records);
        file.check_size();
        s.header = file.header();
        s.comms = file.comms();
        if (with_p2p) {
            read_unslotted(file, s);
            read_p2p(file, s);
            read_history(file, s, history_records);
            read_gpu_spans(file, s.comms, history_records);
        }
        // A file that changed size since it was opened (truncated, regrown, replaced) is not read at all: half of
        // it may be gone or another file's. Named by its error, skipped by the analysis.
        if (file.check_size() && file.read_error().empty()) return s;
        FileSnapshot bad;
        bad.path = s.path;
        bad.error = file.read_error();
        return bad;
    } catch (...) {
        s.ok = false;
        s.error = "out of memory while reading";
    }
    return s;
}

FileSnapshot snapshot_path(const std::string& path, bool with_p2p, uint64_t history_records) noexcept {
    RankFile f;
    f.open(path);
    return snapshot(f, with_p2p, history_records);
}

}  // namespace ncw

// Snapshots of rank files (read/snapshot.h): the header and comm slots, and on request what the ring says about
// point-to-point traffic and the collectives before the signature window.
#include "read/snapshot.h"

#include <algorithm>
#include <cstdint>

#include "ncclwatch/format.h"

namespace ncw {

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

}  // namespace

uint64_t last_seen(const FileSnapshot& f) noexcept {
    uint64_t t = std::max(f.header.heartbeat_mono_ns, f.header.start_mono_ns);
    for (const auto& c : f.comms) t = std::max({t, c.t_last_issue_ns, c.t_last_progress_ns});
    return t;
}

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
        file.check_size();
        s.header = file.header();
        s.comms = file.comms();
        if (with_p2p) {
            read_p2p(file, s);
            read_history(file, s);
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

FileSnapshot snapshot_path(const std::string& path, bool with_p2p) noexcept {
    RankFile f;
    f.open(path);
    return snapshot(f, with_p2p);
}

}  // namespace ncw

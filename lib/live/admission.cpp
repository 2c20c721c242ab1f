// What the live collector lets in (see admission.h).
#include "live/admission.h"

#include <algorithm>
#include <unordered_map>

namespace ncw::live {

size_t set_aside_oversized(std::vector<CommInfo>& comms, size_t max_ranks) {
    const size_t before = comms.size();
    std::erase_if(comms, [&](const CommInfo& c) {
        return c.nranks < 0 || size_t(c.nranks) > max_ranks || (c.nranks > 0 && (c.rank < 0 || c.rank >= c.nranks));
    });
    return before - comms.size();
}

bool shows_progress(const std::vector<CommInfo>& before, const std::vector<CommInfo>& now) {
    for (const auto& n : now)
        for (const auto& b : before)
            if (b.comm_id == n.comm_id) {
                if (n.coll_completed > b.coll_completed || n.ops_completed > b.ops_completed) return true;
                break;
            }
    return false;
}

size_t snapshot_bytes(const FileSnapshot& s) {
    // The rank's bookkeeping (RankState, its index entry, the Conn) beside the snapshot itself.
    size_t n = sizeof(FileSnapshot) + 1024 + s.path.capacity() + s.error.capacity();
    const HeaderInfo& h = s.header;
    n += h.host.capacity() + h.job_id.capacity() + h.py_stacks_text.capacity() * 3 + h.py_held_text.capacity() * 3 +
         h.last_words.capacity();
    for (const auto& e : h.env) n += sizeof e + e.capacity();
    for (const auto& w : s.warnings) n += sizeof w + w.capacity();
    for (const auto& c : s.comms)
        n += sizeof c + c.recent.size() * sizeof(SigInfo) + c.gpu_spans.capacity() * sizeof(verdict::GpuSpan) +
             c.pci_bus_id.capacity() + c.gpu_uuid.capacity();
    for (const auto& t : s.p2p) n += sizeof t + t.peers.capacity() * sizeof(verdict::PeerP2p);
    return n;
}

int pick_victim(const std::vector<JobWeight>& jobs, int keep, bool proven) {
    // Class of a candidate, lower first: 0 finished idle, 1 idle, 2 connected without progress, 3 idle that was
    // training (its ranks may be reconnecting), 4 connected and training, unproven, for a proven newcomer: counts
    // that grow are no proof, a pid or a token is. A proven connected job that is training is never one.
    int best = -1, best_class = 5;
    uint64_t best_last = 0;
    for (int i = 0; i < int(jobs.size()); ++i) {
        const JobWeight& j = jobs[size_t(i)];
        const bool training = j.connected && j.progressing;
        if (i == keep || (training && (j.proven || !proven))) continue;
        const int cls = training ? 4 : j.connected ? 2 : j.finished ? 0 : j.progressing ? 3 : 1;
        if (cls < best_class || (cls == best_class && j.last_frame_ns < best_last)) {
            best = i;
            best_class = cls;
            best_last = j.last_frame_ns;
        }
    }
    return best;
}

void Unproven::add(uint64_t id, const std::string& ip) {
    ids_.emplace(id, ip);
    by_ip_[ip].insert(id);
}

void Unproven::remove(uint64_t id) {
    auto it = ids_.find(id);
    if (it == ids_.end()) return;
    auto b = by_ip_.find(it->second);
    if (b != by_ip_.end()) {
        b->second.erase(id);
        if (b->second.empty()) by_ip_.erase(b);
    }
    ids_.erase(it);
}

size_t Unproven::of_ip(const std::string& ip) const {
    auto b = by_ip_.find(ip);
    return b == by_ip_.end() ? 0 : b->second.size();
}

uint64_t Unproven::victim(const std::string& ip, size_t total, size_t per_ip) const {
    if (auto b = by_ip_.find(ip); b != by_ip_.end() && per_ip && b->second.size() >= per_ip) return *b->second.begin();
    if (total && ids_.size() >= total) return ids_.begin()->first;
    return 0;
}

}  // namespace ncw::live

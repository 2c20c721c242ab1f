// The environment audit, part (b): GPUs (two ranks on one GPU, NCCL_HOSTID splitting a host, LOCAL_RANK against the
// device in use) (see env_audit.h).
#include <algorithm>
#include <map>
#include <set>

#include "engine/env_audit_detail.h"

namespace ncw::audit::detail {

namespace {

// The GPU a process uses: its PCI bus id when known, else its CUDA ordinal under its CUDA_VISIBLE_DEVICES (same
// ordinal and same list on one host = same physical GPU).
struct Gpu {
    int cuda_dev = -1;
    std::string key;    // "" when unknown
    std::string label;  // for the report
};

Gpu gpu_of(const Proc& p) {
    Gpu g;
    if (!p.comms) return g;
    for (const auto& c : *p.comms) {
        if (c.cuda_dev < 0 && c.pci_bus_id.empty()) continue;
        g.cuda_dev = c.cuda_dev;
        if (!c.pci_bus_id.empty()) {
            g.key = p.nccl_host() + "|pci|" + c.pci_bus_id;
            g.label = "GPU " + c.pci_bus_id + " (cuda:" + std::to_string(c.cuda_dev) + ")";
        } else {
            // Without the environment (a 1.0 file) the ordinal says nothing: under per-rank CUDA_VISIBLE_DEVICES
            // every rank is cuda:0 on its own GPU.
            if (p.h->env.empty()) return g;
            const std::string* cvd = p.var("CUDA_VISIBLE_DEVICES");
            g.key = p.nccl_host() + "|dev|" + std::to_string(c.cuda_dev) + "|" + (cvd ? *cvd : "*");
            g.label = "cuda:" + std::to_string(c.cuda_dev) + (cvd ? " of CUDA_VISIBLE_DEVICES=" + *cvd : "");
        }
        return g;
    }
    return g;
}

bool share_a_comm(const Proc& a, const Proc& b) {
    if (!a.comms || !b.comms) return false;
    for (const auto& x : *a.comms)
        for (const auto& y : *b.comms)
            if (x.comm_id != 0 && x.comm_id == y.comm_id) return true;
    return false;
}

// Ranks of one machine that NCCL_HOSTID splits into several NCCL hosts: legal (two of them may then share a GPU), but
// NCCL connects them through its network transport, not shared memory or NVLink. Said once, for every such machine.
void audit_nccl_hostid(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    std::map<std::string, std::map<std::string, std::vector<const Proc*>>> by_machine;  // host -> NCCL host -> procs
    for (const auto& p : procs)
        if (p.has_env) by_machine[p.h->host][p.nccl_host()].push_back(&p);
    Finding f;
    for (const auto& [host, nccl_hosts] : by_machine) {
        if (nccl_hosts.size() < 2) continue;
        std::vector<const Proc*> ps;
        for (const auto& [key, members] : nccl_hosts) ps.insert(ps.end(), members.begin(), members.end());
        f.evidence.push_back(who(ps) + " on host " + host + ": " + std::to_string(nccl_hosts.size()) +
                             " NCCL hosts by NCCL_HOSTID");
        for (const auto* p : ps) f.ranks.push_back(p->h->global_rank);
    }
    if (f.evidence.empty()) return;
    f.severity = Severity::Info;
    f.topic = "nccl_hostid";
    f.summary =
        "NCCL_HOSTID differs among ranks of one machine: NCCL sees them as separate hosts and connects them "
        "through its network transport (sockets or InfiniBand), not shared memory, P2P or NVLink";
    f.ranks.erase(std::remove(f.ranks.begin(), f.ranks.end(), -1), f.ranks.end());
    std::sort(f.ranks.begin(), f.ranks.end());
    out.push_back(std::move(f));
}

}  // namespace

void audit_gpus(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    audit_nccl_hostid(procs, out);
    std::map<std::string, std::vector<const Proc*>> by_gpu;
    std::map<std::string, std::string> labels;
    for (const auto& p : procs) {
        const Gpu g = gpu_of(p);
        if (g.key.empty()) continue;
        by_gpu[g.key].push_back(&p);
        labels[g.key] = g.label;
    }
    for (const auto& [key, ps] : by_gpu) {
        if (ps.size() < 2) continue;
        bool same_comm = false;
        for (size_t i = 0; i < ps.size() && !same_comm; ++i)
            for (size_t j = i + 1; j < ps.size() && !same_comm; ++j) same_comm = share_a_comm(*ps[i], *ps[j]);
        Finding f;
        f.severity = same_comm ? Severity::Error : Severity::Warning;
        f.topic = "duplicate_gpu";
        f.summary = who(ps) + " use one GPU, " + labels[key] + " on host " + ps.front()->h->host +
                    (same_comm ? ", in one communicator (NCCL: \"Duplicate GPU detected\"; init fails or hangs)"
                               : ": they share its memory and compute");
        for (const auto* p : ps) {
            std::string e = p->label() + ": LOCAL_RANK " + std::to_string(p->h->local_rank);
            if (const std::string* cvd = p->var("CUDA_VISIBLE_DEVICES")) e += ", CUDA_VISIBLE_DEVICES=" + *cvd;
            f.evidence.push_back(e);
        }
        f.evidence.push_back("each rank must call torch.cuda.set_device(local_rank) before its first collective");
        f.ranks = ranks_of(ps);
        out.push_back(std::move(f));
    }

    // LOCAL_RANK vs the device: meaningful when every rank of the host sees the same devices (CUDA_VISIBLE_DEVICES
    // unset, or one list of several devices shared by the host's ranks); then local rank i should use cuda:i.
    std::map<std::string, std::set<std::string>> cvd_by_host;
    for (const auto& p : procs) {
        const std::string* cvd = p.var("CUDA_VISIBLE_DEVICES");
        cvd_by_host[p.h->host].insert(cvd ? *cvd : std::string("\x01unset"));
    }
    std::vector<const Proc*> wrong;
    Finding f;
    for (const auto& p : procs) {
        const Gpu g = gpu_of(p);
        if (g.cuda_dev < 0 || p.h->local_rank < 0) continue;
        const std::string* cvd = p.var("CUDA_VISIBLE_DEVICES");
        if (cvd) {
            const auto devices = split(*cvd, ',');
            if (devices.size() < 2 || int(devices.size()) <= p.h->local_rank || cvd_by_host[p.h->host].size() != 1)
                continue;
        } else if (!p.has_env) {
            continue;  // no environment recorded (a 1.0 file): CUDA_VISIBLE_DEVICES is unknown, not unset
        }
        if (g.cuda_dev == p.h->local_rank) continue;
        wrong.push_back(&p);
        f.evidence.push_back(p.label() + ": LOCAL_RANK " + std::to_string(p.h->local_rank) + " uses cuda:" +
                             std::to_string(g.cuda_dev) + (cvd ? " (CUDA_VISIBLE_DEVICES=" + *cvd + ")" : ""));
    }
    if (!wrong.empty()) {
        f.severity = Severity::Warning;
        f.topic = "local_rank_device";
        f.summary = who(wrong) +
                    " use a GPU other than cuda:LOCAL_RANK: torch.cuda.set_device(local_rank) missing or "
                    "wrong, or CUDA_VISIBLE_DEVICES not aligned with LOCAL_RANK";
        f.ranks = ranks_of(wrong);
        out.push_back(std::move(f));
    }
}

}  // namespace ncw::audit::detail

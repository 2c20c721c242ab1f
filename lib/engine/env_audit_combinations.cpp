// The environment audit, part (d): risky combinations (GDR with P2P off, a local-only NCCL_SOCKET_IFNAME on several
// hosts, IB off) (see env_audit.h).
#include <algorithm>
#include <set>

#include "engine/env_audit_detail.h"

namespace ncw::audit::detail {

namespace {

// An interface list for NCCL_SOCKET_IFNAME that can only reach this host: loopback or a container bridge. "^" lists
// exclude interfaces and say nothing about the one chosen.
bool local_only_ifname(const std::string& value) {
    if (value.empty() || value[0] == '^') return false;
    const auto entries = split(value, ',');
    if (entries.empty()) return false;
    for (std::string e : entries) {
        if (!e.empty() && e[0] == '=') e.erase(0, 1);
        const bool local = starts_with(e, "lo") || starts_with(e, "docker") || starts_with(e, "virbr") ||
                           starts_with(e, "br-") || starts_with(e, "veth") || starts_with(e, "cni") ||
                           starts_with(e, "podman");
        if (!local) return false;
    }
    return true;
}

void add_grouped(std::vector<Finding>& out, const std::vector<const Proc*>& ps, Severity sev, const std::string& topic,
                 const std::string& summary, std::vector<std::string> evidence) {
    if (ps.empty()) return;
    Finding f;
    f.severity = sev;
    f.topic = topic;
    f.summary = summary + " (" + who(ps) + ")";
    f.evidence = std::move(evidence);
    f.ranks = ranks_of(ps);
    out.push_back(std::move(f));
}

}  // namespace

void audit_combinations(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    const size_t hosts = distinct_hosts(procs);
    std::vector<const Proc*> gdr_p2p, local_if, ib_off;
    std::set<std::string> if_values;
    for (const auto& p : procs) {
        const std::string* gdr = p.var("NCCL_NET_GDR_LEVEL");
        const std::string* p2p = p.var("NCCL_P2P_DISABLE");
        if (gdr && p2p && (*gdr == "2" || *gdr == "PXB") && *p2p == "1") gdr_p2p.push_back(&p);
        const std::string* ifname = p.var("NCCL_SOCKET_IFNAME");
        if (hosts > 1 && ifname && local_only_ifname(*ifname)) {
            local_if.push_back(&p);
            if_values.insert(*ifname);
        }
        const std::string* ib = p.var("NCCL_IB_DISABLE");
        if (hosts > 1 && ib && *ib == "1") ib_off.push_back(&p);
    }
    add_grouped(out, gdr_p2p, Severity::Warning, "risky_combination",
                "NCCL_NET_GDR_LEVEL=2 with NCCL_P2P_DISABLE=1, a combination operators' write-ups tie to hangs",
                {"GPUDirect RDMA is allowed through PCIe switches while peer-to-peer between GPUs is off: unset one "
                 "of them unless both were chosen deliberately"});
    std::string ifs;
    for (const auto& v : if_values) ifs += (ifs.empty() ? "" : ", ") + v;
    add_grouped(out, local_if, Severity::Error, "socket_ifname_local",
                "NCCL_SOCKET_IFNAME=" + ifs + " names only loopback or a container bridge, in a job spanning " +
                    std::to_string(hosts) + " hosts: ranks on other hosts cannot be reached through it",
                {"hosts: " + hosts_of(local_if),
                 "set NCCL_SOCKET_IFNAME to the interface that carries traffic "
                 "between hosts (e.g. eth0, ens*, ib0)"});
    add_grouped(out, ib_off, Severity::Info, "ib_disabled",
                "NCCL_IB_DISABLE=1 in a job spanning " + std::to_string(hosts) +
                    " hosts: traffic between hosts goes over TCP sockets",
                {"if the hosts have InfiniBand or RoCE, this is much slower and more sensitive to NIC choice"});
}

}  // namespace ncw::audit::detail

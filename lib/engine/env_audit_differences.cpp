// The environment audit, part (a): differences across ranks (versions, WORLD_SIZE, the rendezvous, NCCL_* and
// TORCH_NCCL_* values) (see env_audit.h).
#include <algorithm>
#include <map>
#include <set>

#include "engine/env_audit_detail.h"

namespace ncw::audit::detail {

namespace {

// Groups processes by a value (nullopt-like "" key with `present` false = left out) and reports the ranks outside
// the largest group. Ties go to the value of the lowest rank, so the report is stable.
struct Valued {
    const Proc* p;
    std::string value;
};

void report_split(std::vector<Finding>& out, const std::vector<Valued>& vals, Severity sev, const std::string& topic,
                  const std::string& what) {
    std::map<std::string, std::vector<const Proc*>> groups;
    for (const auto& v : vals) groups[v.value].push_back(v.p);
    if (groups.size() < 2) return;
    auto lowest = [](const std::vector<const Proc*>& g) {
        int r = INT32_MAX;
        for (const auto* p : g)
            if (p->h->global_rank >= 0) r = std::min(r, int(p->h->global_rank));
        return r;
    };
    auto majority = groups.begin();
    for (auto it = groups.begin(); it != groups.end(); ++it) {
        if (it->second.size() > majority->second.size() ||
            (it->second.size() == majority->second.size() && lowest(it->second) < lowest(majority->second)))
            majority = it;
    }
    Finding f;
    f.severity = sev;
    f.topic = topic;
    std::vector<const Proc*> minority;
    for (auto it = groups.begin(); it != groups.end(); ++it) {
        if (it == majority) continue;
        minority.insert(minority.end(), it->second.begin(), it->second.end());
        f.evidence.push_back(what + " " + it->first + " on " + who(it->second) + " (hosts " + hosts_of(it->second) +
                             ")");
    }
    f.evidence.push_back(what + " " + majority->first + " on " + who(majority->second) + " (the majority, " +
                         std::to_string(majority->second.size()) + " of " + std::to_string(vals.size()) + ")");
    std::string odd = who(minority) + " have other values";
    if (groups.size() == 2) {
        const auto other = majority == groups.begin() ? std::next(groups.begin()) : groups.begin();
        odd = who(minority) + (minority.size() == 1 ? " has " : " have ") + other->first;
    }
    f.summary = what + " differs across ranks: " + odd + "; the majority (" + std::to_string(majority->second.size()) +
                " of " + std::to_string(vals.size()) + ") has " + majority->first;
    f.ranks = ranks_of(minority);
    out.push_back(std::move(f));
}

}  // namespace

void audit_differences(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    std::vector<Valued> nccl, driver, world;
    for (const auto& p : procs) {
        if (p.h->nccl_version > 0) nccl.push_back({&p, nccl_version_str(p.h->nccl_version)});
        if (p.h->cuda_driver_version > 0) driver.push_back({&p, driver_version_str(p.h->cuda_driver_version)});
        if (p.h->world_size > 0) world.push_back({&p, std::to_string(p.h->world_size)});
    }
    report_split(out, nccl, Severity::Error, "version_mismatch", "NCCL version");
    report_split(out, driver, Severity::Warning, "version_mismatch", "CUDA driver version");
    report_split(out, world, Severity::Error, "world_size_mismatch", "WORLD_SIZE");

    // Variables: only processes that recorded their environment take part (a 1.0 file says nothing about it).
    std::set<std::string> names;
    for (const auto& p : procs)
        for (const auto& [n, v] : p.env)
            // NCCL_HOSTID names a host: it differs across hosts by design (the GPU audit below reads it).
            if (n == "MASTER_ADDR" || n == "MASTER_PORT" || starts_with(n, "TORCH_NCCL_") ||
                (starts_with(n, "NCCL_") && n != "NCCL_HOSTID"))
                names.insert(n);
    for (const auto& name : names) {
        std::vector<Valued> vals;
        for (const auto& p : procs) {
            if (!p.has_env) continue;
            const std::string* v = p.var(name);
            vals.push_back({&p, v ? "'" + *v + "'" : std::string("(unset)")});
        }
        const bool rendezvous = name == "MASTER_ADDR" || name == "MASTER_PORT";
        report_split(out, vals, rendezvous ? Severity::Error : Severity::Warning,
                     rendezvous ? "rendezvous_mismatch" : "env_mismatch", name);
    }
}

}  // namespace ncw::audit::detail

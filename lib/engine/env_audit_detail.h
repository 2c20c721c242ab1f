// What the environment audit's parts share (env_audit_*.cpp), not part of its interface (env_audit.h): one process
// with its environment parsed, the words for ranks and hosts, and the four parts of the audit.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/env_audit.h"
#include "read/text.h"

namespace ncw::audit::detail {

inline constexpr size_t kMaxListed = 16;  // ranks or hosts named one by one in a line before "and N more"

bool starts_with(std::string_view s, std::string_view p);
std::vector<std::string> split(const std::string& s, char sep);  // empty items left out
using text::nccl_version_str;                                    // NCCL_VERSION_CODE as "2.28.9"
std::string driver_version_str(int code);                        // cuDriverGetVersion as "12.4"

// One process, with its environment parsed.
struct Proc {
    const HeaderInfo* h = nullptr;
    const std::vector<CommInfo>* comms = nullptr;
    std::map<std::string, std::string> env;    // the variables
    std::map<std::string, std::string> facts;  // "ncclwatch.*", without the prefix
    bool has_env = false;                      // format 1.1 with a written region

    const std::string* var(const std::string& name) const {
        auto it = env.find(name);
        return it == env.end() ? nullptr : &it->second;
    }
    const std::string* fact(const std::string& name) const {
        auto it = facts.find(name);
        return it == facts.end() ? nullptr : &it->second;
    }
    // The host as NCCL sees it: NCCL takes its host hash from NCCL_HOSTID when that is set, so ranks of one machine
    // with different NCCL_HOSTID values are different hosts to it (and may share a GPU).
    std::string nccl_host() const {
        const std::string* id = var("NCCL_HOSTID");
        return id ? h->host + "|NCCL_HOSTID=" + *id : h->host;
    }
    std::string label() const {
        std::string s =
            h->global_rank >= 0 ? "rank " + std::to_string(h->global_rank) : "pid " + std::to_string(h->pid);
        if (!h->host.empty()) s += " (" + h->host + ")";
        return s;
    }
};

// "ranks 3, 7" / "rank 3" / "2 processes of unknown rank"
std::string who(const std::vector<const Proc*>& ps);
std::string hosts_of(const std::vector<const Proc*>& ps);       // "node0, node1", at most kMaxListed
std::vector<int> ranks_of(const std::vector<const Proc*>& ps);  // their global ranks, sorted
size_t distinct_hosts(const std::vector<Proc>& procs);

// The four parts, in the order audit_job runs them; each appends its findings. `procs` in global rank order.
void audit_differences(const std::vector<Proc>& procs, std::vector<Finding>& out);   // env_audit_differences.cpp
void audit_gpus(const std::vector<Proc>& procs, std::vector<Finding>& out);          // env_audit_gpus.cpp
void audit_no_effect(const std::vector<Proc>& procs, std::vector<Finding>& out);     // env_audit_no_effect.cpp
void audit_combinations(const std::vector<Proc>& procs, std::vector<Finding>& out);  // env_audit_combinations.cpp

}  // namespace ncw::audit::detail

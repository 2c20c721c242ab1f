// The environment audit (see env_audit.h): each process's environment parsed, the words for ranks and hosts, then
// the four parts audit_job runs in turn, (a) to (d), over the processes in global rank order, each appending its
// findings.
#include "engine/env_audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "read/text.h"

namespace ncw::audit {

const char* severity_name(Severity s) {
    switch (s) {
        case Severity::Info: return "info";
        case Severity::Warning: return "warning";
        case Severity::Error: return "error";
    }
    return "unknown";
}

namespace {

// ---- One process with its environment parsed, and the words for ranks and hosts ----

constexpr size_t kMaxListed = 16;  // ranks or hosts named one by one in a line before "and N more"

using text::nccl_version_str;  // NCCL_VERSION_CODE as "2.28.9"

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

// "0-5, 7, 9" for ranks; unknown ranks are left out.
std::string rank_ranges(std::vector<int> ranks) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::string out;
    size_t items = 0;
    for (size_t i = 0; i < ranks.size();) {
        if (ranks[i] < 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
        if (items == kMaxListed) {
            out += ", ...";
            break;
        }
        if (!out.empty()) out += ", ";
        out += std::to_string(ranks[i]);
        if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
        ++items;
        i = j + 1;
    }
    return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Empty items left out.
std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        size_t e = s.find(sep, b);
        if (e == std::string::npos) e = s.size();
        if (e > b) out.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return out;
}

// cuDriverGetVersion: 1000*major + 10*minor.
std::string driver_version_str(int code) {
    if (code <= 0) return "unknown";
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d", code / 1000, code % 1000 / 10);
    return buf;
}

// "ranks 3, 7" / "rank 3" / "2 processes of unknown rank"
std::string who(const std::vector<const Proc*>& ps) {
    std::vector<int> ranks;
    size_t unknown = 0;
    for (const auto* p : ps) {
        if (p->h->global_rank >= 0)
            ranks.push_back(p->h->global_rank);
        else
            ++unknown;
    }
    std::string out;
    if (!ranks.empty()) out = (ranks.size() == 1 ? "rank " : "ranks ") + rank_ranges(ranks);
    if (unknown) {
        if (!out.empty()) out += " and ";
        out += std::to_string(unknown) + (unknown == 1 ? " process" : " processes") + " of unknown rank";
    }
    return out;
}

// "node0, node1", at most kMaxListed.
std::string hosts_of(const std::vector<const Proc*>& ps) {
    std::set<std::string> hosts;
    for (const auto* p : ps)
        if (!p->h->host.empty()) hosts.insert(p->h->host);
    std::string out;
    size_t n = 0;
    for (const auto& h : hosts) {
        if (n++ == kMaxListed) {
            out += ", ... (" + std::to_string(hosts.size()) + " hosts)";
            break;
        }
        out += (out.empty() ? "" : ", ") + h;
    }
    return out;
}

// Their global ranks, sorted.
std::vector<int> ranks_of(const std::vector<const Proc*>& ps) {
    std::vector<int> r;
    for (const auto* p : ps)
        if (p->h->global_rank >= 0) r.push_back(p->h->global_rank);
    std::sort(r.begin(), r.end());
    return r;
}

size_t distinct_hosts(const std::vector<Proc>& procs) {
    std::set<std::string> hosts;
    for (const auto& p : procs) hosts.insert(p.h->host);
    return hosts.size();
}

// `only_must_agree`: the variables of NCW_MUST_AGREE_SETTINGS only (must_agree_differences).
Proc parse(const ProcessFacts& pf, bool only_must_agree = false) {
    Proc p;
    p.h = pf.header;
    p.comms = pf.comms;
    for (const auto& e : pf.header->env) {
        const size_t eq = e.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        if (only_must_agree) {
            p.has_env = true;
            if (!must_agree_why(std::string_view(e).substr(0, eq))) continue;
        }
        std::string name = e.substr(0, eq), value = e.substr(eq + 1);
        if (starts_with(name, "ncclwatch."))
            p.facts[name.substr(10)] = std::move(value);
        else
            p.env[std::move(name)] = std::move(value);
        p.has_env = true;
    }
    return p;
}

// ---- (a) differences across ranks: versions, WORLD_SIZE, the rendezvous, NCCL_* and TORCH_NCCL_* values ----

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

// Each variable of `names` whose value differs across the processes that recorded their environment: the rendezvous
// and the settings that must agree (NCW_MUST_AGREE_SETTINGS, with why) are errors, the others warnings.
void split_variables(const std::vector<Proc>& procs, const std::set<std::string>& names, std::vector<Finding>& out) {
    for (const auto& name : names) {
        std::vector<Valued> vals;
        for (const auto& p : procs) {
            if (!p.has_env) continue;
            const std::string* v = p.var(name);
            vals.push_back({&p, v ? "'" + *v + "'" : std::string("(unset)")});
        }
        const bool rendezvous = name == "MASTER_ADDR" || name == "MASTER_PORT";
        const char* why = must_agree_why(name);
        const size_t before = out.size();
        report_split(out, vals, rendezvous || why ? Severity::Error : Severity::Warning,
                     rendezvous ? "rendezvous_mismatch"
                     : why      ? "setting_mismatch"
                                : "env_mismatch",
                     name);
        if (why && out.size() > before) out.back().evidence.push_back(why);
    }
}

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
    split_variables(procs, names, out);
}

// ---- (b) GPUs: two ranks on one GPU, NCCL_HOSTID splitting a host, LOCAL_RANK against the device in use ----

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

// ---- (c) variables that do nothing: names the running NCCL or libtorch never reads, legacy spellings ----

// The NCCL release the built-in table was checked against (../shared/FIELD-NOTES.md: its 219 embedded names).
constexpr const char* kCheckedNccl = "NCCL 2.28.9";
// Variables that circulate in operators' write-ups. For a rank whose library was not scanned, these stand in for the
// scan: `never_read` ones have no effect in kCheckedNccl; `legacy` ones are still read under an old spelling.
struct KnownName {
    const char* name;
    const char* current;  // the name that does what the user meant, or nullptr
    const char* hint;     // what to do instead when there is no current name, or nullptr
    bool never_read;      // true: no effect; false: a legacy spelling that is still read
    bool torch;           // PyTorch's variable under its old name (read, if at all, by libtorch, not NCCL)
};

constexpr KnownName kKnownNames[] = {
    {"NCCL_SOCKET_TIMEOUT", nullptr, "NCCL sockets have no timeout variable", true, false},
    {"NCCL_IB_DISABLE_THRESHOLD", nullptr, nullptr, true, false},
    {"NCCL_ASYNC_ERROR_POLLING_PERIOD_MS", nullptr, nullptr, true, false},
    {"NCCL_IF_LIST", "NCCL_SOCKET_IFNAME", nullptr, true, false},
    {"NCCL_IB_IFNAME", "NCCL_IB_HCA", "NCCL_IB_HCA picks InfiniBand devices, NCCL_SOCKET_IFNAME socket interfaces",
     true, false},
    {"NCCL_TIMEOUT", nullptr,
     "NCCL has no collective timeout: set timeout= in torch.distributed.init_process_group, or NCCLWATCH_TIMEOUT_SEC",
     true, false},
    {"NCCL_NSOCKETS", "NCCL_NSOCKS_PERTHREAD", nullptr, true, false},
    {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", nullptr, true, true},
    {"NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT", nullptr, true, true},
    {"NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG", nullptr, true, true},
    {"NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING", nullptr, true, true},
    {"NCCL_MIN_NRINGS", "NCCL_MIN_NCHANNELS", nullptr, false, false},
    {"NCCL_MAX_NRINGS", "NCCL_MAX_NCHANNELS", nullptr, false, false},
};

const KnownName* known_name(const std::string& name) {
    for (const auto& k : kKnownNames)
        if (name == k.name) return &k;
    return nullptr;
}

struct NoEffect {
    std::vector<const Proc*> procs;
    std::string source;
};

// Set by container images and installers to describe the installation, not to configure NCCL: nobody expects NCCL
// to read them (NVIDIA's images set NCCL_VERSION=2.28.3-1, seen on the GPU machine), so they are not "no effect".
bool informational(const std::string& name) {
    static const char* const names[] = {"NCCL_VERSION", "NCCL_HOME",    "NCCL_ROOT",
                                        "NCCL_DIR",     "NCCL_PATH",    "NCCL_INCLUDE_DIR",
                                        "NCCL_LIB_DIR", "NCCL_LIBRARY", "NCCL_PKG_VERSION"};
    for (const char* n : names)
        if (name == n) return true;
    return false;
}

void audit_no_effect(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    // name -> (how we know) -> processes. The key keeps a scan's verdict apart from the built-in table's.
    std::map<std::string, std::map<std::string, std::vector<const Proc*>>> none, legacy;
    for (const auto& p : procs) {
        const std::string* lib = p.fact("nccl_library");
        const std::string* reads = p.fact("nccl_reads");
        const std::string* no_effect = p.fact("no_effect");
        const bool scanned = reads && no_effect;
        std::set<std::string> scanned_none;
        if (scanned) {
            for (const auto& n : split(*no_effect, ',')) scanned_none.insert(n);
            for (const auto& n : scanned_none) {
                if (!p.var(n)) continue;  // the shim's list is of set variables; guard against a damaged entry
                if (informational(n)) continue;
                const std::string src = "scan of " + (lib ? *lib : std::string("the NCCL library")) + " (" + *reads +
                                        " NCCL_* names" +
                                        (p.h->nccl_version > 0 ? ", NCCL " + nccl_version_str(p.h->nccl_version) : "") +
                                        ") and of the other loaded libraries";
                none[n][src].push_back(&p);
            }
        }
        for (const auto& [name, value] : p.env) {
            const KnownName* k = known_name(name);
            if (!k) continue;
            if (scanned) {
                // The scan decides; the table only adds the current name, and notes a legacy spelling still read.
                if (!scanned_none.count(name) && k->current && !k->never_read)
                    legacy[name]["scan: still read"].push_back(&p);
                else if (!scanned_none.count(name) && k->current && k->torch)
                    legacy[name]["scan: read by libtorch"].push_back(&p);
                continue;
            }
            if (k->never_read)
                none[name][std::string("ncclwatch's built-in list, checked against ") + kCheckedNccl +
                           " and PyTorch 2.11 (this rank's libraries were not scanned)"]
                    .push_back(&p);
            else
                legacy[name]["built-in list"].push_back(&p);
        }
        if (const std::string* tnone = p.fact("torch_no_effect")) {
            const std::string* tlib = p.fact("torch_library");
            for (const auto& n : split(*tnone, ','))
                if (p.var(n))
                    none[n]
                        ["scan of " + (tlib ? *tlib : std::string("libtorch")) + " (" +
                         (p.fact("torch_reads") ? *p.fact("torch_reads") : std::string("?")) + " TORCH_NCCL_* names)"]
                            .push_back(&p);
        }
    }

    for (const auto& [name, by_source] : none) {
        const KnownName* k = known_name(name);
        const bool torch_var = starts_with(name, "TORCH_NCCL_");
        for (const auto& [source, ps] : by_source) {
            Finding f;
            f.severity = Severity::Warning;
            f.topic = "no_effect";
            std::string reader;
            if (torch_var) {
                reader = "the loaded libtorch never reads it";
            } else if (starts_with(source, "scan")) {
                const int v = ps.front()->h->nccl_version;
                reader = (v > 0 ? "NCCL " + nccl_version_str(v) : std::string("the loaded NCCL")) + " never reads it";
            } else {
                reader = std::string(kCheckedNccl) + " never reads it";
            }
            f.summary = name + " has no effect (" + reader + ")";
            if (k && k->current) f.summary += std::string("; the current name is ") + k->current;
            f.summary += "; set on " + who(ps);
            if (k && k->hint) f.evidence.push_back(k->hint);
            f.evidence.push_back("source: " + source);
            f.evidence.push_back(name + "=" + *ps.front()->var(name) + " on " + who(ps));
            f.ranks = ranks_of(ps);
            out.push_back(std::move(f));
        }
    }
    for (const auto& [name, by_source] : legacy) {
        const KnownName* k = known_name(name);
        std::vector<const Proc*> ps;
        for (const auto& [source, v] : by_source) ps.insert(ps.end(), v.begin(), v.end());
        Finding f;
        f.severity = Severity::Info;
        f.topic = "legacy_name";
        f.summary =
            name + " is a legacy spelling, still read; the current name is " + k->current + " (set on " + who(ps) + ")";
        for (const auto& [source, v] : by_source) f.evidence.push_back("source: " + source + " (" + who(v) + ")");
        f.ranks = ranks_of(ps);
        out.push_back(std::move(f));
    }
}

// ---- (d) risky combinations: GDR with P2P off, a local-only NCCL_SOCKET_IFNAME on several hosts, IB off ----

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

// "10 s", "10 min", "1.5 s": a timeout as the user set it.
std::string timeout_words(uint32_t ms) {
    if (ms % 60000 == 0) return std::to_string(ms / 60000) + " min";
    if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
    return fmt::format("{:g} s", ms / 1000.0);
}

// torch's process-group timeout (format 1.15, where the launcher's hook read it) beside NCCLWATCH_TIMEOUT_SEC: the
// watchdog that ends the job and the one that names the culprit. ncclwatch reports a stall before torch ends the job
// only where its timeout is the shorter.
void audit_timeouts(const std::vector<Proc>& procs, std::vector<Finding>& out) {
    uint32_t torch_ms = 0, ours_ms = 0;
    std::vector<const Proc*> known, late;
    for (const auto& p : procs) {
        if (!p.h->torch_timeout_ms) continue;
        known.push_back(&p);
        if (!torch_ms || p.h->torch_timeout_ms < torch_ms) torch_ms = p.h->torch_timeout_ms;
        if (p.h->timeout_ms && (!ours_ms || p.h->timeout_ms < ours_ms)) ours_ms = p.h->timeout_ms;
    }
    if (known.empty()) return;
    for (const Proc* p : known)
        if (p->h->timeout_ms && p->h->timeout_ms >= p->h->torch_timeout_ms) late.push_back(p);
    const std::string both = "torch's process-group timeout " + timeout_words(torch_ms) +
                             (ours_ms ? ", NCCLWATCH_TIMEOUT_SEC " + timeout_words(ours_ms) : std::string());
    if (!late.empty()) {
        add_grouped(out, late, Severity::Warning, "timeouts",
                    both +
                        ": ncclwatch's timeout is not the shorter, so torch's NCCL watchdog ends a hung job "
                        "before ncclwatch names its culprit",
                    {"set NCCLWATCH_TIMEOUT_SEC below the timeout= of init_process_group and new_group"});
        return;
    }
    add_grouped(out, known, Severity::Info, "timeouts",
                both + ": ncclwatch names a stall's culprit before torch's NCCL watchdog ends the job",
                {"torch's timeout is the shortest timeout= of init_process_group and new_group (torch's default for "
                 "the backend where none was given), read by ncclwatch's launcher hook"});
}

}  // namespace

const char* must_agree_why(std::string_view name) {
#define NCW_MUST_AGREE_CASE(n, why) \
    if (name == n) return why;
    NCW_MUST_AGREE_SETTINGS(NCW_MUST_AGREE_CASE)
#undef NCW_MUST_AGREE_CASE
    return nullptr;
}

namespace {

// The processes with their environments parsed (only the settings that must agree, if asked), in global rank order
// so that every list in the report is.
std::vector<Proc> parse_all(const std::vector<ProcessFacts>& facts, bool only_must_agree) {
    std::vector<Proc> procs;
    procs.reserve(facts.size());
    for (const auto& pf : facts)
        if (pf.header) procs.push_back(parse(pf, only_must_agree));
    std::sort(procs.begin(), procs.end(),
              [](const Proc& a, const Proc& b) { return a.h->global_rank < b.h->global_rank; });
    return procs;
}

}  // namespace

std::vector<Finding> must_agree_differences(const std::vector<ProcessFacts>& facts) {
    std::vector<Finding> out;
    try {
        const std::vector<Proc> procs = parse_all(facts, true);
        std::set<std::string> names;
        for (const auto& p : procs)
            for (const auto& [n, v] : p.env) names.insert(n);
        split_variables(procs, names, out);
    } catch (...) {
        // Out of memory: an extra, never a reason for the verdict to fail.
    }
    return out;
}

std::vector<Finding> audit_job(const std::vector<ProcessFacts>& facts) {
    std::vector<Finding> out;
    try {
        const std::vector<Proc> procs = parse_all(facts, false);
        audit_differences(procs, out);
        audit_gpus(procs, out);
        audit_no_effect(procs, out);
        audit_combinations(procs, out);
        audit_timeouts(procs, out);
        // Most severe first; stable, so each kind keeps the order above.
        std::stable_sort(out.begin(), out.end(),
                         [](const Finding& a, const Finding& b) { return int(a.severity) > int(b.severity); });
    } catch (...) {
        // Out of memory: the audit is an extra, never a reason for the verdict to fail.
    }
    return out;
}

}  // namespace ncw::audit

// The environment audit, part (c): variables that do nothing (names the running NCCL or libtorch never reads, legacy
// spellings) (see env_audit.h).
#include <algorithm>
#include <map>
#include <set>

#include "engine/env_audit_detail.h"

namespace ncw::audit::detail {

namespace {

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

}  // namespace

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

}  // namespace ncw::audit::detail

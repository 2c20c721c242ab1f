// The environment audit (see env_audit.h): one process's environment parsed, the words for ranks and hosts, and
// audit_job running the four parts (env_audit_differences.cpp, _gpus, _no_effect, _combinations).
#include "engine/env_audit.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "engine/env_audit_detail.h"

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

namespace detail {

namespace {

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

}  // namespace

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

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

}  // namespace detail

namespace {

using namespace detail;

Proc parse(const ProcessFacts& pf) {
    Proc p;
    p.h = pf.header;
    p.comms = pf.comms;
    for (const auto& e : pf.header->env) {
        const size_t eq = e.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        std::string name = e.substr(0, eq), value = e.substr(eq + 1);
        if (starts_with(name, "ncclwatch."))
            p.facts[name.substr(10)] = std::move(value);
        else
            p.env[std::move(name)] = std::move(value);
        p.has_env = true;
    }
    return p;
}

}  // namespace

std::vector<Finding> audit_job(const std::vector<ProcessFacts>& facts) {
    std::vector<Finding> out;
    try {
        std::vector<Proc> procs;
        procs.reserve(facts.size());
        for (const auto& pf : facts)
            if (pf.header) procs.push_back(parse(pf));
        // Processes in global rank order, so every list in the report is.
        std::sort(procs.begin(), procs.end(),
                  [](const Proc& a, const Proc& b) { return a.h->global_rank < b.h->global_rank; });
        audit_differences(procs, out);
        audit_gpus(procs, out);
        audit_no_effect(procs, out);
        audit_combinations(procs, out);
        // Most severe first; stable, so each kind keeps the order above.
        std::stable_sort(out.begin(), out.end(),
                         [](const Finding& a, const Finding& b) { return int(a.severity) > int(b.severity); });
    } catch (...) {
        // Out of memory: the audit is an extra, never a reason for the verdict to fail.
    }
    return out;
}

}  // namespace ncw::audit

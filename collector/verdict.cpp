// The verdict engine. Everything here is a pure function of the CommView (and `now`): no I/O, no clocks, no globals,
// so the shim's watchdog, the live collector and the offline analyser reach the same verdict from the same files.
#include "verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "ncclwatch/format.h"

namespace ncw::verdict {

namespace {

using disk::OpType;

// ncclResult_t values (nccl.h, NCCL 2.28.9). Kept here so the verdict engine needs no NCCL header.
constexpr int32_t kNcclInProgress = 7;

const char* nccl_result_name(int32_t r) {
    static const char* const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    return r >= 0 && r < 8 ? names[r] : "unknown ncclResult_t";
}

// ncclInProgress is what ncclCommGetAsyncError reports for a nonblocking communicator with work in flight: normal.
bool is_async_error(int32_t r) { return r != 0 && r != kNcclInProgress; }

std::string hex_comm(uint64_t id) { return fmt::format("0x{:016x}", id); }
std::string secs(double s) { return fmt::format("{:.1f} s", s); }

double ns_to_s(uint64_t ns) { return double(ns) / 1e9; }
double age_s(uint64_t now_ns, uint64_t t_ns) { return t_ns && now_ns > t_ns ? ns_to_s(now_ns - t_ns) : 0.0; }

std::string join_ranks(const std::vector<int>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(r[i]);
    }
    return out;
}

// "rank 2" / "ranks 0,1,3"
std::string ranks_word(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + join_ranks(r); }

// The fields that take part in matching. root only matters for rooted ops and redop only for reducing ops: NCCL
// ignores the other (PyTorch passes whatever it has), so a difference there is not a mismatch.
struct Key {
    uint8_t op;
    uint8_t dtype;
    uint64_t count;
    int32_t root;
    int32_t redop;
    auto operator<=>(const Key&) const = default;
};

Key key_of(const OpSig& s) {
    const auto t = OpType(s.op);
    return Key{s.op, s.dtype, s.count, disk::is_rooted(t) ? s.root : -1, disk::has_redop(t) ? s.redop : 0};
}

// "float32, 1048576 elements, sum, root 0"
std::string sig_body(const OpSig& s) {
    const auto t = OpType(s.op);
    std::string out = fmt::format("{}, {} element{}", disk::dtype_name(s.dtype), s.count, s.count == 1 ? "" : "s");
    if (disk::has_redop(t)) out += fmt::format(", {}", disk::redop_name(s.redop));
    if (disk::is_rooted(t)) out += fmt::format(", root {}", s.root);
    return out;
}

// "AllReduce #42 (float32, 1048576 elements, sum)"; without the seq: "AllReduce (float32, ...)".
std::string sig_short(const OpSig& s, bool with_seq) {
    if (OpType(s.op) == OpType::None) return with_seq ? fmt::format("#{} (signature not recorded)", s.seq) : "an op";
    if (with_seq) return fmt::format("{} #{} ({})", disk::op_name(s.op), s.seq, sig_body(s));
    return fmt::format("{} ({})", disk::op_name(s.op), sig_body(s));
}

const OpSig* find_sig(const RankCommState& r, uint64_t seq) {
    if (seq == 0) return nullptr;
    for (const auto& s : r.recent)
        if (s.seq == seq) return &s;
    return nullptr;
}

// "rank 0 (global 0, host h, pid 123)"
std::string rank_id(const RankCommState& r) {
    return fmt::format("rank {} (global {}, host {}, pid {})", r.comm_rank, r.global_rank,
                       r.host.empty() ? "?" : r.host, r.pid);
}

// The comm ranks 0..nranks-1 for which no state is visible.
std::vector<int> missing_ranks(const CommView& v) {
    std::vector<int> out;
    for (int r = 0; r < v.nranks; ++r) {
        const bool seen =
            std::any_of(v.ranks.begin(), v.ranks.end(), [r](const RankCommState& s) { return s.comm_rank == r; });
        if (!seen) out.push_back(r);
    }
    return out;
}

// Indices of view.ranks in comm-rank order, so every list and evidence line comes out sorted.
std::vector<size_t> by_comm_rank(const CommView& v) {
    std::vector<size_t> idx(v.ranks.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return v.ranks[a].comm_rank < v.ranks[b].comm_rank; });
    return idx;
}

// When this rank's current wait began, or nothing if it is not inside a collective or the time is unknown.
// stall_since_ns (set by the shim's watchdog) wins. Otherwise the wait began when the previous op had completed AND
// the one after it had been issued: the later of the two. Taking the last progress alone would count the compute
// between two collectives as waiting and flag a rank that just entered its next op after a long forward pass.
std::optional<uint64_t> wait_start(const RankCommState& r) {
    if (r.issued <= r.completed) return std::nullopt;
    if (r.stall_since_ns) return r.stall_since_ns;
    uint64_t t_issue = 0;
    if (const OpSig* s = find_sig(r, r.completed + 1)) t_issue = s->t_issue_ns;
    // The last issue is the issue of completed+1 only when exactly one op is in flight; with more in flight it is
    // later, so it would understate the wait and is used only when nothing else is known.
    if (!t_issue && r.issued == r.completed + 1) t_issue = r.t_last_issue_ns;
    uint64_t t = std::max(r.t_last_progress_ns, t_issue);
    if (!t) t = r.t_last_issue_ns;
    if (!t) return std::nullopt;
    return t;
}

// The rank has issued collectives but its GPU has not reached the oldest incomplete one: it is busy with earlier
// work on its stream, not waiting inside NCCL.
bool gpu_behind(const RankCommState& r) { return r.gpu_tracking && r.issued > r.completed && r.reached <= r.completed; }

// Seconds the rank has waited inside its oldest incomplete collective; nothing if it is not waiting. A dead rank
// is never "waiting" (it is a candidate culprit instead), nor is one whose GPU has not got to the collective yet.
std::optional<double> wait_seconds(const RankCommState& r, uint64_t now_ns) {
    if (!r.alive || gpu_behind(r)) return std::nullopt;
    const auto t = wait_start(r);
    if (!t) return std::nullopt;
    return *t < now_ns ? ns_to_s(now_ns - *t) : 0.0;
}

// Seconds without completion progress for a rank whose GPU is still busy before its oldest incomplete collective.
// Such a rank is not waiting inside NCCL, but if it stays there past the timeout it is a stall of its own (its
// GPU is stuck or very slow), even when no other rank waits for it (a one-rank communicator).
std::optional<double> busy_seconds(const RankCommState& r, uint64_t now_ns) {
    if (!r.alive || !gpu_behind(r)) return std::nullopt;
    const auto t = wait_start(r);
    if (!t) return std::nullopt;
    return *t < now_ns ? ns_to_s(now_ns - *t) : 0.0;
}

// One line of state per rank, shared by every stall verdict.
std::string rank_state_line(const RankCommState& r, uint64_t now_ns, uint64_t W) {
    std::string line = rank_id(r) + fmt::format(": issued #{}", r.issued);
    if (r.gpu_tracking)
        line += fmt::format(", reached #{}, completed #{}", r.reached, r.completed);
    else
        line += fmt::format(", completed #{} (no GPU tracking: completed = call returned)", r.completed);
    if (!r.alive) {
        if (r.exited_clean)
            line += ", DEAD: exited cleanly (exit handlers ran)";
        else
            line += fmt::format(", DEAD: gone (killed?), heartbeat {} old", secs(r.heartbeat_age_s));
    } else if (gpu_behind(r)) {
        line += fmt::format(", GPU busy with earlier work before #{}", r.completed + 1);
    } else if (const auto w = wait_seconds(r, now_ns)) {
        if (r.completed + 1 == W)
            line += fmt::format(", waiting {}", secs(*w));
        else
            line += fmt::format(", waiting {} in #{}", secs(*w), r.completed + 1);
    } else if (r.issued <= r.completed) {
        line += ", idle (not inside NCCL)";
        if (r.t_last_issue_ns) line += fmt::format(", last issue {} ago", secs(age_s(now_ns, r.t_last_issue_ns)));
    }
    if (is_async_error(r.async_error))
        line += fmt::format(", async error {} ({})", nccl_result_name(r.async_error), r.async_error);
    return line;
}

// The op at the rank's latest issued seq, described, for "its last op".
std::string last_op(const RankCommState& r) {
    if (r.issued == 0) return "no collective on this communicator";
    if (const OpSig* s = find_sig(r, r.issued)) return sig_short(*s, true);
    return fmt::format("#{} (signature not recorded)", r.issued);
}

// One group of ranks that issued the same signature at one seq.
struct Group {
    Key key;
    const OpSig* sig;  // the lowest rank's copy
    std::vector<int> ranks;
};

// Groups sorted by size (largest first), ties broken by lowest comm rank.
std::vector<Group> group_by_sig(const std::vector<std::pair<int, const OpSig*>>& entries) {
    std::vector<Group> groups;
    for (const auto& [rank, sig] : entries) {
        const Key k = key_of(*sig);
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == k; });
        if (it == groups.end())
            groups.push_back(Group{k, sig, {rank}});
        else
            it->ranks.push_back(rank);
    }
    for (auto& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
        if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
        return a.ranks.front() < b.ranks.front();
    });
    return groups;
}

// "count: rank 1 = 524288; ranks 0,2,3 = 1048576" for each field in which the groups differ.
void field_evidence(const std::vector<Group>& groups, std::vector<std::string>& ev) {
    auto line = [&](const char* field, auto applies, auto value) {
        std::vector<std::string> parts;
        std::vector<std::string> distinct;
        for (const auto& g : groups) {
            if (!applies(g)) continue;
            std::string v = value(g);
            if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
            parts.push_back(fmt::format("{} = {}", ranks_word(g.ranks), v));
        }
        if (distinct.size() < 2) return;
        std::string out = fmt::format("{}: ", field);
        for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
        ev.push_back(std::move(out));
    };
    auto always = [](const Group&) { return true; };
    line("op", always, [](const Group& g) { return std::string(disk::op_name(g.key.op)); });
    line("dtype", always, [](const Group& g) { return std::string(disk::dtype_name(g.key.dtype)); });
    line("count", always, [](const Group& g) { return std::to_string(g.key.count); });
    line(
        "root", [](const Group& g) { return disk::is_rooted(OpType(g.key.op)); },
        [](const Group& g) { return std::to_string(g.key.root); });
    line(
        "redop", [](const Group& g) { return disk::has_redop(OpType(g.key.op)); },
        [](const Group& g) { return std::string(disk::redop_name(g.key.redop)); });
}

// The signature of `seq` as most of `ranks` recorded it (tie: lowest rank); falls back to any visible rank's copy.
OpSig majority_sig(const CommView& v, const std::vector<size_t>& order, const std::vector<int>& ranks, uint64_t seq) {
    std::vector<std::pair<int, const OpSig*>> entries;
    const OpSig* any = nullptr;
    for (size_t i : order) {
        const auto& r = v.ranks[i];
        const OpSig* s = find_sig(r, seq);
        if (!s) continue;
        if (!any) any = s;
        if (std::find(ranks.begin(), ranks.end(), r.comm_rank) != ranks.end()) entries.emplace_back(r.comm_rank, s);
    }
    if (!entries.empty()) return *group_by_sig(entries).front().sig;
    if (any) return *any;
    OpSig none;
    none.seq = seq;
    return none;
}

}  // namespace

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::NotJoined: return "NOT_JOINED";
        case Kind::GpuNotReached: return "GPU_NOT_REACHED";
        case Kind::StuckInNccl: return "STUCK_IN_NCCL";
        case Kind::Mismatch: return "MISMATCH";
        case Kind::Dead: return "DEAD";
        case Kind::AsyncError: return "ASYNC_ERROR";
        case Kind::Unknown: return "UNKNOWN";
        case Kind::ExtraOp: return "EXTRA_OP";
        case Kind::InitHang: return "INIT_HANG";
        case Kind::Straggler: return "STRAGGLER";
    }
    return "UNKNOWN";
}

std::string describe_op(const OpSig& op) {
    if (OpType(op.op) == OpType::None) return fmt::format("#{} (signature not recorded)", op.seq);
    return fmt::format("{} #{} ({}, stream 0x{:x}, tid {})", disk::op_name(op.op), op.seq, sig_body(op), op.stream,
                       op.tid);
}

std::vector<Verdict> find_mismatches(const CommView& view) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);

    // seq -> (comm rank, signature), ranks in comm-rank order. Only collectives are matched: p2p ops legitimately
    // differ between peers and lifecycle events take no sequence number.
    std::map<uint64_t, std::vector<std::pair<int, const OpSig*>>> by_seq;
    std::map<int, const RankCommState*> state_of;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        state_of.emplace(r.comm_rank, &r);
        std::vector<uint64_t> seen;  // a rank contributes one signature per seq (the first, should it repeat)
        for (const auto& s : r.recent) {
            if (s.seq == 0 || !disk::is_collective(OpType(s.op))) continue;
            if (std::find(seen.begin(), seen.end(), s.seq) != seen.end()) continue;
            seen.push_back(s.seq);
            by_seq[s.seq].emplace_back(r.comm_rank, &s);
        }
    }

    std::vector<Verdict> out;
    for (const auto& [seq, entries] : by_seq) {
        if (entries.size() < 2) continue;
        const auto groups = group_by_sig(entries);
        if (groups.size() < 2) continue;

        Verdict v;
        v.kind = Kind::Mismatch;
        v.comm_id = view.comm_id;
        v.seq = seq;
        v.missing = missing;
        v.op = *groups.front().sig;

        // With no strict majority (1 vs 1, 2 vs 2, ...) nothing says which side is wrong: name every rank rather
        // than blame one side arbitrarily.
        const bool tie = groups[0].ranks.size() == groups[1].ranks.size();
        std::string what;
        if (tie) {
            for (const auto& g : groups) v.culprits.insert(v.culprits.end(), g.ranks.begin(), g.ranks.end());
            what = "ranks disagree: ";
            for (size_t i = 0; i < groups.size(); ++i)
                what += fmt::format("{}{} issued {}", i ? ", " : "", ranks_word(groups[i].ranks),
                                    sig_short(*groups[i].sig, false));
        } else {
            for (size_t i = 1; i < groups.size(); ++i) {
                v.culprits.insert(v.culprits.end(), groups[i].ranks.begin(), groups[i].ranks.end());
                what += fmt::format("{}{} issued {}", i > 1 ? ", " : "", ranks_word(groups[i].ranks),
                                    sig_short(*groups[i].sig, false));
            }
            what += fmt::format(" but {} issued {}", ranks_word(groups[0].ranks), sig_short(*groups[0].sig, false));
        }
        std::sort(v.culprits.begin(), v.culprits.end());
        v.summary = fmt::format("comm {}: MISMATCH at #{}: {}", hex_comm(view.comm_id), seq, what);

        field_evidence(groups, v.evidence);
        for (const auto& [rank, sig] : entries)
            v.evidence.push_back(rank_id(*state_of[rank]) + ": " + describe_op(*sig));
        out.push_back(std::move(v));
    }
    return out;  // std::map iterates in seq order
}

std::vector<Verdict> diagnose_stall(const CommView& view, uint64_t now_ns, double timeout_s) {
    const auto order = by_comm_rank(view);
    const auto missing = missing_ranks(view);
    // nranks 0 means the size is unknown: the visible ranks are then all we can count.
    const size_t nranks = view.nranks > 0 ? size_t(view.nranks) : view.ranks.size();

    // W: the oldest sequence number that a rank has waited in for at least the timeout.
    uint64_t W = 0;
    double busy_for = 0;
    for (const auto& r : view.ranks) {
        auto w = wait_seconds(r, now_ns);
        if (const auto b = busy_seconds(r, now_ns); b && *b >= timeout_s) {
            w = b;
            busy_for = std::max(busy_for, *b);
        }
        if (w && *w >= timeout_s && (W == 0 || r.completed + 1 < W)) W = r.completed + 1;
    }
    if (W == 0) return {};

    // Everyone alive and inside W (issued it, its GPU got to it, not completed it) waits in W, timed out or not yet.
    std::vector<int> waiting;
    double stalled_for = 0;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (!r.alive || r.issued < W || r.completed >= W || (r.gpu_tracking && r.reached < W)) continue;
        waiting.push_back(r.comm_rank);
        if (const auto w = wait_seconds(r, now_ns)) stalled_for = std::max(stalled_for, *w);
    }
    if (waiting.empty()) stalled_for = busy_for;

    Verdict base;
    base.comm_id = view.comm_id;
    base.seq = W;
    base.waiting = waiting;
    base.missing = missing;
    base.op = majority_sig(view, order, waiting, W);
    base.stalled_for_s = stalled_for;
    for (size_t i : order) base.evidence.push_back(rank_state_line(view.ranks[i], now_ns, W));
    if (!missing.empty())
        base.evidence.push_back(
            fmt::format("{} of {}: not visible from here (no rank file)", ranks_word(missing), nranks));

    const std::string head = fmt::format("comm {}: {} of {} ranks wait in {} for {}", hex_comm(view.comm_id),
                                         waiting.size(), nranks, sig_short(base.op, true), secs(stalled_for));

    auto make = [&](Kind k, std::vector<int> culprits, const std::string& what, std::vector<std::string> first) {
        Verdict v = base;
        v.kind = k;
        v.culprits = std::move(culprits);
        v.summary = head + "; " + what;
        first.insert(first.end(), v.evidence.begin(), v.evidence.end());
        v.evidence = std::move(first);
        return v;
    };

    std::vector<Verdict> out;

    // 1. NCCL itself reported an error: reported first, but it does not stop the search for who is behind.
    {
        std::vector<int> culprits;
        std::string what;
        for (size_t i : order) {
            const auto& r = view.ranks[i];
            if (!is_async_error(r.async_error)) continue;
            culprits.push_back(r.comm_rank);
            what += fmt::format("{}{} ({} {})", what.empty() ? "" : ", ", r.comm_rank, nccl_result_name(r.async_error),
                                r.async_error);
        }
        if (!culprits.empty())
            out.push_back(make(Kind::AsyncError, culprits,
                               fmt::format("NCCL reported an asynchronous error on {} {}",
                                           culprits.size() == 1 ? "rank" : "ranks", what),
                               {}));
    }

    // 2. Dead: a process that is gone before completing W (never issued it, or died inside it).
    // 3. NotJoined: a live process that has not issued W. Both can hold at once; both are reported.
    std::vector<int> dead, behind;
    std::string dead_what;
    std::vector<std::string> dead_ev;
    bool dead_clean = false;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (r.alive || r.completed >= W) continue;
        dead.push_back(r.comm_rank);
        std::string how = r.exited_clean ? "exited cleanly (exit handlers ran)"
                                         : fmt::format("is gone (killed?; heartbeat {} old)", secs(r.heartbeat_age_s));
        dead_clean |= r.exited_clean;
        if (r.issued < W)
            dead_what += fmt::format("{}rank {} {} after its last op {}: completed #{}, never issued #{}",
                                     dead_what.empty() ? "" : "; ", r.comm_rank, how, last_op(r), r.completed, W);
        else
            dead_what += fmt::format("{}rank {} {} inside #{}: issued it, never completed it",
                                     dead_what.empty() ? "" : "; ", r.comm_rank, how, W);
        dead_ev.push_back(fmt::format("{}: last op {}", rank_id(r),
                                      find_sig(r, r.issued) ? describe_op(*find_sig(r, r.issued)) : last_op(r)));
    }
    if (!dead.empty()) {
        if (dead_clean)
            dead_ev.push_back(
                "a rank that exits cleanly while the others still issue collectives usually ran out of data first "
                "(dataset not divisible by the world size without drop_last=True, or set_epoch missing)");
        out.push_back(make(Kind::Dead, dead, dead_what, dead_ev));
    }

    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (r.alive && r.issued < W) behind.push_back(r.comm_rank);
    }
    if (!behind.empty()) {
        // Ranks in the same position are described together: "ranks 0,1,2 are behind: completed #42, ...".
        // Groups keep comm-rank order: the group of the lowest rank comes first.
        std::vector<std::pair<std::pair<uint64_t, uint64_t>, std::vector<size_t>>> same;  // (completed, issued)
        for (size_t i : order) {
            const auto& r = view.ranks[i];
            if (!r.alive || r.issued >= W) continue;
            const std::pair<uint64_t, uint64_t> pos{r.completed, r.issued};
            auto it = std::find_if(same.begin(), same.end(), [&](const auto& g) { return g.first == pos; });
            if (it == same.end())
                same.push_back({pos, {i}});
            else
                it->second.push_back(i);
        }
        std::string what;
        std::vector<std::string> ev;
        bool all_idle = true;
        for (const auto& [pos, idx] : same) {
            const auto [completed, issued] = pos;
            std::vector<int> rs;
            double lo = 1e300, hi = 0;
            for (size_t i : idx) {
                rs.push_back(view.ranks[i].comm_rank);
                const double a = age_s(now_ns, view.ranks[i].t_last_issue_ns);
                lo = std::min(lo, a);
                hi = std::max(hi, a);
                ev.push_back(fmt::format("{}: last issued {}", rank_id(view.ranks[i]),
                                         find_sig(view.ranks[i], issued) ? describe_op(*find_sig(view.ranks[i], issued))
                                                                         : last_op(view.ranks[i])));
            }
            const auto& first = view.ranks[idx.front()];
            std::string pos_what = fmt::format("completed #{}", completed);
            if (issued > completed) {
                all_idle = false;
                pos_what += fmt::format(", inside #{}", issued);
            }
            pos_what += fmt::format(", never issued #{}", W);
            std::string last = fmt::format("last issued {}", last_op(first));
            if (issued && first.t_last_issue_ns) {
                const bool one = fmt::format("{:.1f}", lo) == fmt::format("{:.1f}", hi);
                last += one ? fmt::format(", {} ago", secs(hi)) : fmt::format(", {:.1f} to {} ago", lo, secs(hi));
            }
            what += fmt::format("{}{} {} behind: {} ({})", what.empty() ? "" : "; ", ranks_word(rs),
                                rs.size() == 1 ? "is" : "are", pos_what, last);
        }
        // A minority waiting on an idle majority: more likely the minority issued one op too many than the
        // majority skipped one (op counts diverged: gradient accumulation, a rank-dependent code path).
        if (all_idle && behind.size() > waiting.size()) {
            what += fmt::format("; {} idle outside NCCL: {} may have issued an extra collective",
                                behind.size() == 1 ? "it is" : "they are", ranks_word(waiting));
            ev.push_back(
                fmt::format("{} idle with every issued op completed while {} {} in #{}: the op counts "
                            "diverged (gradient accumulation, GradScaler or a code path taken by some ranks)",
                            ranks_word(behind), ranks_word(waiting), waiting.size() == 1 ? "waits" : "wait", W));
        } else if (all_idle) {
            ev.push_back(
                fmt::format("{} idle outside NCCL: busy elsewhere (validation, checkpoint: wait it out) or "
                            "skipped the collective (a `continue` before backward())",
                            ranks_word(behind)));
        }
        out.push_back(make(Kind::NotJoined, behind, what, ev));
    }

    // A disagreement at W among the ranks that issued it (always checked: it explains a hang in any state).
    for (auto& m : find_mismatches(view)) {
        if (m.seq != W) continue;
        m.waiting = waiting;
        m.stalled_for_s = stalled_for;
        out.push_back(std::move(m));
    }

    if (!dead.empty() || !behind.empty()) return out;

    // 4. Every live rank issued W, but some GPU has not got to it yet.
    std::vector<int> not_reached;
    std::string nr_what;
    for (size_t i : order) {
        const auto& r = view.ranks[i];
        if (!r.alive || !r.gpu_tracking || r.reached >= W || r.completed >= W) continue;
        not_reached.push_back(r.comm_rank);
        nr_what +=
            fmt::format("{}rank {}'s GPU has not reached #{} (busy with earlier work on its stream): reached #{}",
                        nr_what.empty() ? "" : "; ", r.comm_rank, W, r.reached);
    }
    if (!not_reached.empty()) {
        out.push_back(make(Kind::GpuNotReached, not_reached, nr_what, {}));
        return out;
    }

    // 5. Every visible rank is inside W (or past it) and no one is behind.
    size_t done = 0;
    for (const auto& r : view.ranks)
        if (r.alive && r.completed >= W) ++done;
    if (!missing.empty()) {
        // The visible ranks look fine, so the one holding W up is most likely among those we cannot see.
        out.push_back(make(Kind::Unknown, missing,
                           fmt::format("the {} visible ranks all issued #{} and none is behind; {} not visible from "
                                       "here: the likely culprit{}",
                                       view.ranks.size(), W, ranks_word(missing), missing.size() == 1 ? "" : "s"),
                           {}));
        return out;
    }
    std::string what = done == 0 ? fmt::format("all {} ranks are inside #{}; none completed", nranks, W)
                                 : fmt::format("all {} ranks issued #{}; {} completed it, {} still inside", nranks, W,
                                               done, waiting.size());
    what += ": stuck inside NCCL (transport?)";
    out.push_back(make(Kind::StuckInNccl, {}, what,
                       {"every rank issued and reached the op: check the network path (NCCL_SOCKET_IFNAME, "
                        "NCCL_IB_HCA, GDR/P2P settings) in the environment audit"}));
    return out;
}

}  // namespace ncw::verdict

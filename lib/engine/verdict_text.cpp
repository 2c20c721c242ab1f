// The words of the evidence: ops, ranks and rank states as the verdicts name them.
#include "engine/verdict_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/causal.h"
#include "engine/verdict_ranks.h"
#include "ncclwatch/format.h"
#include "read/text.h"

namespace ncw::verdict {

using disk::OpType;

std::string hex_comm(uint64_t id) { return text::hex(id); }
std::string secs(double s) { return fmt::format("{:.1f} s", s); }

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
    return v[i];
}

namespace {

// "1,4,7", and past 16 ranks in runs, "0-2,5,9-16383": the ranks a communicator's size claims but no file shows can
// number 2^20, and a line must stay a line.
std::string join_ranks(const std::vector<int>& r) {
    std::string out;
    const bool runs = r.size() > 16;
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (runs && j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
        if (i) out += ',';
        out += std::to_string(r[i]);
        if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(r[j]);
        i = j + 1;
    }
    return out;
}

}  // namespace

// "rank 2" / "ranks 0,1,3"
std::string ranks_word(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + join_ranks(r); }

// "float32, 1048576 elements, sum, root 0"
std::string sig_body(const OpSig& s) {
    const auto t = OpType(s.op);
    std::string out = fmt::format("{}, {} element{}", disk::dtype_name(s.dtype), s.count, s.count == 1 ? "" : "s");
    if (disk::has_redop(t)) out += fmt::format(", {}", disk::redop_name(s.redop));
    if (disk::is_rooted(t)) out += fmt::format(", root {}", s.root);
    // Issued by a launch of the CUDA graph it was captured into, not by a call (format 1.10).
    if (s.origin == uint8_t(disk::RecordOrigin::Replay)) out += ", a CUDA graph replay";
    return out;
}

// "AllReduce #42 (float32, 1048576 elements, sum)"; without the seq: "AllReduce (float32, ...)".
std::string sig_short(const OpSig& s, bool with_seq) {
    if (OpType(s.op) == OpType::None) return with_seq ? fmt::format("#{} (signature not recorded)", s.seq) : "an op";
    if (with_seq) return fmt::format("{} #{} ({})", disk::op_name(s.op), s.seq, sig_body(s));
    return fmt::format("{} ({})", disk::op_name(s.op), sig_body(s));
}

// "rank 0 (global 0, host h, pid 123)"
std::string rank_id(const RankCommState& r) {
    return fmt::format("rank {} (global {}, host {}, pid {})", r.comm_rank, r.global_rank,
                       r.host.empty() ? "?" : r.host, r.pid);
}

std::string bounds_basis(const RankCommState& r) {
    if (exact_counts(r)) return "";
    if (r.gpu_source == uint32_t(disk::GpuSource::Profiler)) return "NCCL profiler, not every op seen";
    const bool sampled =
        std::any_of(r.recent.begin(), r.recent.end(), [](const OpSig& g) { return g.flags & disk::kFlagSampledOut; });
    return sampled ? "CUDA events, sampled" : "CUDA events";
}

// One line of state per rank, shared by every stall verdict.
std::string rank_state_line(const RankCommState& r, uint64_t now_ns, uint64_t W) {
    std::string line = rank_id(r) + ": " + progress_words(r);
    if (!r.alive) {
        if (r.end_kind)
            line += ", DEAD: " + end_words(r);  // engine/causal.h
        else if (r.exited_clean)
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

std::string progress_words(const RankCommState& r) {
    if (!r.gpu_tracking)
        return fmt::format("issued #{}, completed #{} (no GPU tracking: completed = call returned)", r.issued,
                           r.completed);
    std::string out = fmt::format("issued #{}, reached #{}, completed #{}", r.issued, r.reached, r.completed);
    if (r.progress_exact) return out;
    // The proofs still standing (one the counts caught up with proves nothing); where they close the counts, they
    // are what makes them exact.
    std::string proofs;
    if (r.unreached > r.reached && r.unreached > r.completed && r.unreached <= r.issued)
        proofs += fmt::format("; #{} proven not reached", r.unreached);
    if (r.uncompleted > r.completed && r.uncompleted <= r.issued)
        proofs += fmt::format("; #{} proven not completed", r.uncompleted);
    if (exact_counts(r)) return proofs.empty() ? out : out + " (" + proofs.substr(2) + ")";
    return out + " (lower bounds: " + bounds_basis(r) + proofs + ")";
}

std::string describe_op(const OpSig& op) {
    if (OpType(op.op) == OpType::None) return fmt::format("#{} (signature not recorded)", op.seq);
    return fmt::format("{} #{} ({}, stream 0x{:x}, tid {})", disk::op_name(op.op), op.seq, sig_body(op), op.stream,
                       op.tid);
}

}  // namespace ncw::verdict

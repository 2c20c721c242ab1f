// The words of the evidence (verdict_text.cpp): ops, ranks and rank states as the verdicts name them, and the
// durations and result codes in them. For the verdict engine's parts (verdict_*.cpp, causal, suspicion); the words a
// report leads with are report/headline.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/verdict.h"
#include "ncclwatch/format.h"
#include "read/text.h"

namespace ncw::verdict {

// ncclResult_t values (nccl.h, NCCL 2.28.9). Kept here so the verdict engine needs no NCCL header.
inline constexpr int32_t kNcclInProgress = 7;
using text::nccl_result_name;
// ncclInProgress is what ncclCommGetAsyncError reports for a nonblocking communicator with work in flight: normal.
inline bool is_async_error(int32_t r) { return r != 0 && r != kNcclInProgress; }
// Whether the rank's communicator broke (an asynchronous error, a call that failed with a communication error, an
// abort). Its GPU completions after that prove nothing about its peers: an abort ends the kernels it cancels.
inline bool comm_broke(const RankCommState& r) {
    return text::nccl_result_breaks_comm(r.async_error) ||
           (r.ops_failed && text::nccl_result_breaks_comm(r.first_failed_result)) ||
           r.comm_state == uint32_t(disk::CommState::Aborted);
}
std::string hex_comm(uint64_t id);                 // "0x00000000000000c0"
std::string secs(double s);                        // "12.5 s"
double quantile(std::vector<double> v, double q);  // nearest rank (the median of 4 is the third); 0 for none
inline double ns_to_s(uint64_t ns) { return double(ns) / 1e9; }
inline double age_s(uint64_t now_ns, uint64_t t_ns) { return t_ns && now_ns > t_ns ? ns_to_s(now_ns - t_ns) : 0.0; }
std::string ranks_word(const std::vector<int>& r);  // "rank 2" / "ranks 0,1,3"
std::string sig_body(const OpSig& s);               // "float32, 1048576 elements, sum, root 0[, a CUDA graph replay]"
// "AllReduce #42 (float32, 1048576 elements, sum)"; without the seq: "AllReduce (float32, ...)".
std::string sig_short(const OpSig& s, bool with_seq);
std::string rank_id(const RankCommState& r);  // "rank 0 (global 0, host h, pid 123)"
// One line of state per rank, shared by every stall verdict; W: the seq the stall is about.
std::string rank_state_line(const RankCommState& r, uint64_t now_ns, uint64_t W);
std::string last_op(const RankCommState& r);  // the op at the rank's latest issued seq, for "its last op"
// Where a rank's lower-bound counts come from: "CUDA events, sampled", "NCCL profiler, not every op seen"; "" when
// they are exact.
std::string bounds_basis(const RankCommState& r);

}  // namespace ncw::verdict

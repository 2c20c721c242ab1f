// What the verdict engine's tests share (test_verdict*.cpp): hand-built ranks and communicator views on one clock.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/verdict.h"
#include "ncclwatch/format.h"

namespace verdict_fixtures {

using namespace ncw::verdict;
using ncw::disk::OpType;


inline constexpr uint64_t kSec = 1'000'000'000ull;
inline constexpr uint64_t kNow = 10'000 * kSec;
inline constexpr double kTimeout = 10.0;
inline constexpr uint64_t kComm = 0x1234abcdull;
inline constexpr uint8_t kFloat32 = 7;  // ncclFloat32
inline constexpr int32_t kSum = 0;      // ncclSum

inline uint64_t ago(double s) { return kNow - uint64_t(s * double(kSec)); }

inline OpSig sig(uint64_t seq, OpType op = OpType::AllReduce, uint64_t count = 1048576, int32_t root = -1,
          int32_t redop = kSum, uint8_t dtype = kFloat32) {
    OpSig s;
    s.seq = seq;
    s.op = uint8_t(op);
    s.dtype = dtype;
    s.count = count;
    s.root = root;
    s.redop = redop;
    s.tid = 7;
    s.stream = 0x7f00;
    return s;
}

// A rank that completed everything it issued (#done), last issue `idle_for` seconds ago. Its counts are exact (NCCL's
// profiler saw every op's GPU start and end); lower_bounds() makes them what sampled CUDA events give.
inline RankCommState idle(int r, uint64_t done, double idle_for = 20.0) {
    RankCommState s;
    s.comm_rank = r;
    s.global_rank = r;
    s.host = "node0";
    s.pid = 1000 + r;
    s.gpu_tracking = true;
    s.gpu_source = uint32_t(ncw::disk::GpuSource::Profiler);
    s.progress_exact = true;
    s.issued = s.returned = s.reached = s.completed = done;
    s.t_last_issue_ns = s.t_last_progress_ns = ago(idle_for + 0.5);
    for (uint64_t q = done > 3 ? done - 3 : 1; q <= done; ++q) {
        s.recent.push_back(sig(q));
        s.recent.mut().back().t_issue_ns = ago(idle_for + 1.0 + double(done - q));
    }
    return s;
}

// A rank whose GPU is inside #(done+1) (issued up to `issued`) for `for_s` seconds; stall_since_ns set.
inline RankCommState waiting(int r, uint64_t done, double for_s, uint64_t issued = 0) {
    RankCommState s = idle(r, done, for_s + 1.0);
    s.issued = s.returned = issued ? issued : done + 1;
    s.reached = done + 1;
    for (uint64_t q = done + 1; q <= s.issued; ++q) {
        s.recent.push_back(sig(q));
        s.recent.mut().back().t_issue_ns = ago(for_s);
    }
    s.t_last_issue_ns = ago(for_s);
    s.stall_since_ns = ago(for_s);
    return s;
}

// The same counts as lower bounds (CUDA events): nothing past them proven either way, unless `unreached` or
// `uncompleted` say so.
inline RankCommState lower_bounds(RankCommState s, uint64_t unreached = 0, uint64_t uncompleted = 0) {
    s.gpu_source = uint32_t(ncw::disk::GpuSource::Events);
    s.progress_exact = false;
    s.unreached = unreached;
    s.uncompleted = uncompleted;
    return s;
}

inline CommView view(int nranks, std::vector<RankCommState> ranks) {
    CommView v;
    v.comm_id = kComm;
    v.nranks = nranks;
    v.ranks = std::move(ranks);
    return v;
}

inline bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

inline const Verdict* find_kind(const std::vector<Verdict>& vs, Kind k) {
    auto it = std::find_if(vs.begin(), vs.end(), [k](const Verdict& v) { return v.kind == k; });
    return it == vs.end() ? nullptr : &*it;
}

using Ranks = std::vector<int>;

}  // namespace verdict_fixtures

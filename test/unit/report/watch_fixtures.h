// The watchdog's events' fixture, shared by the report tests (test_watch_events, test_stderr_budget): eight ranks of
// one host, rank 2 idle after #9, the seven others waiting in #10; and what the stalled process knows of it.
#pragma once

#include <string>
#include <vector>

#include "engine/job_view.h"
#include "report/watch_events.h"
#include "verdict_fixtures.h"

namespace watch_fixtures {

using namespace verdict_fixtures;

inline constexpr const char* kJobDir = "/tmp/ncw/job-q";

// The job, the seven waiting for `for_s`.
inline ncw::JobResult eight_rank_stall(double for_s = 12.0) {
    std::vector<RankCommState> ranks;
    for (int r = 0; r < 8; ++r) ranks.push_back(r == 2 ? idle(r, 9, for_s) : waiting(r, 9, for_s));
    ncw::JobResult job;
    job.job_id = "job-q";
    job.now_mono_ns = kNow;
    ncw::CommResult c;
    c.job_id = job.job_id;
    c.comm_id = kComm;
    c.view = view(8, ranks);
    c.verdicts = diagnose_stall(c.view, kNow, kTimeout);
    job.comms.push_back(std::move(c));
    return job;
}

// Comm rank `rank`'s own stall, `for_s` long.
inline ncw::report::OwnStall own_of(const ncw::CommResult& c, int rank, double for_s = 12.0) {
    ncw::report::OwnStall own;
    own.comm_id = c.comm_id;
    own.rank = rank;
    own.nranks = 8;
    own.counts = c.view.ranks[size_t(rank)];
    own.stalled_for_s = for_s;
    own.timeout_s = kTimeout;
    own.job_dir = kJobDir;
    return own;
}

}  // namespace watch_fixtures

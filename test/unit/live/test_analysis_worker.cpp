// The live collector's analysis thread (lib/live/analysis_worker.h): one task at a time, the loop woken through its
// eventfd when it is done, the snapshots handed back before the result, and a stop that interrupts the task under way.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "live/analysis_worker.h"
#include "ncclwatch/format.h"

using namespace ncw;
using namespace ncw::live;

namespace {

// A readable rank of job "j" with one communicator: enough for analyze() to build a job from.
std::shared_ptr<const FileSnapshot> rank_snapshot(int rank, int nranks = 2) {
    auto s = std::make_shared<FileSnapshot>();
    s->ok = true;
    s->path = "host:rank" + std::to_string(rank);
    s->header.job_id = "j";
    s->header.global_rank = rank;
    s->header.host = "host";
    s->header.pid = 100 + rank;
    CommInfo c;
    c.comm_id = 0x42;
    c.state = uint32_t(disk::CommState::Active);
    c.rank = rank;
    c.nranks = nranks;
    s->comms.push_back(c);
    return s;
}

std::unique_ptr<AnalysisTask> task() {
    auto t = std::make_unique<AnalysisTask>();
    t->job_id = "j";
    t->snaps = {rank_snapshot(0), rank_snapshot(1)};
    t->options.live = true;
    return t;
}

bool wait_readable(int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
}

}  // namespace

TEST_CASE("analysis worker: one task at a time, the loop woken when it is done") {
    const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    REQUIRE(wake >= 0);
    {
        AnalysisWorker w(wake);
        CHECK_FALSE(w.busy());
        CHECK(w.take() == nullptr);  // nothing posted

        auto t = task();
        const std::weak_ptr<const FileSnapshot> held = t->snaps[0];
        REQUIRE(w.post(t));
        CHECK(t == nullptr);  // the thread has it
        CHECK(w.busy());
        auto second = task();
        CHECK_FALSE(w.post(second));  // one at a time: handed back
        CHECK(second != nullptr);

        REQUIRE(wait_readable(wake, 10000));
        auto done = w.take();
        REQUIRE(done != nullptr);
        CHECK_FALSE(w.busy());
        CHECK(done->result.files_read == 2);
        REQUIRE(done->result.jobs.size() == 1);
        CHECK(done->result.jobs[0].job_id == "j");
        CHECK(done->cost_s >= 0);
        CHECK(done->snaps.empty());  // handed back before the result: the loop may write to them in place
        second->snaps.clear();
        CHECK(held.expired());

        // Again, now that it is free.
        uint64_t n = 0;
        CHECK(read(wake, &n, sizeof n) == sizeof n);
        auto third = task();
        REQUIRE(w.post(third));
        w.stop();  // the task stops at its next step, and is handed back
        CHECK(w.take() != nullptr);
        auto after = task();
        CHECK_FALSE(w.post(after));  // stopped
    }
    close(wake);
}

// Issue 45: `serve` ignored SIGTERM while it analysed (minutes, for claims no rank made): the analysis thread's task
// stops at its next step once stop() is called, and says it is incomplete.
TEST_CASE("analysis worker: stop() interrupts the task under way") {
    const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    REQUIRE(wake >= 0);
    {
        constexpr int kRanks = 20000;  // a task that takes a while (tenths of a second) to judge whole
        auto t = std::make_unique<AnalysisTask>();
        t->job_id = "j";
        t->options.live = true;
        for (int r = 0; r < kRanks; ++r) t->snaps.push_back(rank_snapshot(r, kRanks));
        AnalysisWorker w(wake);
        REQUIRE(w.post(t));
        w.stop();
        auto done = w.take();
        REQUIRE(done != nullptr);
        CHECK(done->result.cancelled);
        CHECK(done->result.jobs.empty());
    }
    close(wake);
}

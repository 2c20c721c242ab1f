// The completion tracker (shim/complete/completion_tracker.h) and what follows a call (op_complete.cpp) over the
// fake CUDA driver (test/fake_cuda: streams that are counters; this test links it, so the shim's loader finds a
// libcuda.so.1 in the process), with the poller's thread running: a sampled op's events, followers covered by the
// next event, what pending events prove, the catch-up on a quiet stream, a teardown's settle, the drain at exit.
// Every wait is for a condition (the poller's passes, a count), bounded by a deadline.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "fake_cuda.h"
#include "shim/base/clock.h"
#include "shim/base/cuda_driver.h"
#include "shim/complete/completion_tracker.h"
#include "shim/complete/op_complete.h"
#include "shim/record/runtime.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;
using Kind = CompletionTracker::EventKind;

namespace {

constexpr uint64_t kMs = 1000000ull;

// One runtime and one poller for the whole process, as in the shim (the poller never stops): each test takes
// communicators and streams of its own.
struct Tracked {
    TempDir& dir;
    Runtime* rt = new Runtime;  // never freed: the poller reads its registry until the process ends
    DevicePool* pool = nullptr;
    std::string hold_file;
    uint16_t next_slot = 0;

    explicit Tracked(TempDir& d) : dir(d), hold_file(d.file("gpu-hold")) {
        // Read by the fake at its first call (cuInit, from the shim's loader below): while it exists, the streams
        // complete as many items as it says.
        setenv("FAKE_CUDA_HOLD_FILE", hold_file.c_str(), 1);
        REQUIRE(cuda_driver().ok);
        rt->file = create_rank_file(dir.path.string(), test_identity("completion"), 1024, 0);
        rt->tracker = CompletionTracker::create(rt->cfg, &rt->file, &rt->comms);
        REQUIRE(rt->tracker != nullptr);
        pool = rt->tracker->pool_for_device(0);
        REQUIRE(pool != nullptr);
        std::thread([t = rt->tracker] { t->poll_forever(); }).detach();
    }

    // A communicator of its own (comm slot, registry entry), its events from the device's pool unless `with_pool` is
    // false: the poller then neither catches up on its streams nor writes its proofs.
    CommRuntime& comm(bool with_pool = true) {
        const uint16_t slot = next_slot++;
        CommRuntime* cr = make_comm(rt->file, 0xc000 + slot, slot);
        cr->cuda_dev = 0;
        if (with_pool) cr->pool.store(pool);
        REQUIRE(rt->comms.insert(reinterpret_cast<ncclComm_t>(uintptr_t(0x1000 + 16 * slot)), cr));
        return *cr;
    }

    // Waits until a pass of the poller has begun and ended since the call.
    void full_pass() const {
        const PassCounter& p = rt->tracker->pass_counter();
        const uint64_t n0 = p.n.load();
        const uint64_t target = n0 + 2 + (n0 & 1);
        wait_until([&] { return p.n.load() >= target; }, "a poller pass");
    }

    template <typename F>
    static void wait_until(F&& cond, const char* what) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!cond()) {
            if (std::chrono::steady_clock::now() > deadline) FAIL("timed out waiting for " << what);
            std::this_thread::yield();
        }
    }
};

Tracked& tracked() {
    static TempDir dir("ncw_completion");
    static Tracked* t = new Tracked(dir);
    return *t;
}

// The GPU got through the first `n` items of every stream (the hold file); gone at the end of the scope.
struct HoldFile {
    std::string path;
    explicit HoldFile(const std::string& p, uint64_t n = 0) : path(p) { set(n); }
    void set(uint64_t n) const {
        std::FILE* f = std::fopen(path.c_str(), "w");
        REQUIRE(f != nullptr);
        std::fprintf(f, "%llu\n", (unsigned long long)n);
        std::fclose(f);
    }
    ~HoldFile() { std::remove(path.c_str()); }
};

struct Issued {
    OpRef ref;
    StreamClaim* claim = nullptr;
    CompletionTracker::Sampling smp;
};

// One collective through the steps of the wrappers' hot path (shim/intercept/op_hook.h run_op, outside a group, no
// profiler): sampled or not, its "reached" event or mark, its kernel on the fake stream, the return, then what follows
// the call (op_complete.cpp). `t`: its issue time, which decides the sampling (a pause of 1 ms: sampled).
Issued issue(CommRuntime& cr, cudaStream_t s, uint64_t t) {
    Tracked& x = tracked();
    Issued op;
    op.claim = cr.claim_for(s);
    op.smp = CompletionTracker::sample(op.claim, t, false, 8);
    IssueOptions opt;
    if (!op.smp.gen) opt.flags |= disk::kFlagSampledOut;
    op.ref = record_issue(x.rt->file, cr, coll(disk::OpType::AllReduce, 8, s), opt, t);
    if (op.smp.gen)
        x.rt->tracker->record(x.pool, s, &op.ref, 1, Kind::Reached, op.claim);
    else if (op.smp.mark)
        x.rt->tracker->record(x.pool, s, &op.ref, 1, Kind::Mark, op.claim);
    fakecuda_enqueue(s);  // the kernel
    record_return(x.rt->file, op.ref, ncclSuccess, t + 1000);
    complete_after_return(*x.rt, cr, op.ref, s, x.pool, op.claim, op.smp.gen, ncclSuccess, t + 1000, After::Event);
    return op;
}

// An issue time a second ago: the ops' returns lie before any event the poller records now (it stamps a follower's
// record once an event recorded after its return completed), and a stream with followers is quiet at once (a
// catch-up, where its communicator has a pool and is not torn down).
uint64_t past() { return now_mono_ns() - 1000 * kMs; }

cudaStream_t stream_of(const CommRuntime& cr, uintptr_t n = 0) {
    return reinterpret_cast<cudaStream_t>(uintptr_t(0x100000) * (cr.slot_index + 1) + 0x100 * (n + 1));
}

const disk::CommSlot& slot(const CommRuntime& cr) { return *cr.slot.load(); }
const disk::OpRecord& record(const OpRef& ref) {
    const RankFileWriter& f = tracked().rt->file;
    return f.ring[ref.ticket & f.ring_mask];
}

}  // namespace

TEST_CASE("a sampled op's reached and completed events advance the counts as its stream completes") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    fakecuda_hold(s, 1);
    const uint64_t recorded = x.rt->tracker->events_recorded();
    const Issued op = issue(cr, s, past());
    CHECK(op.smp.gen != 0);
    CHECK(x.rt->tracker->events_recorded() == recorded + 2);
    // The "reached" event was recorded before the kernel: done. The completed one waits behind it.
    Tracked::wait_until([&] { return slot(cr).coll_reached.load() == 1; }, "coll_reached 1");
    x.full_pass();
    CHECK(slot(cr).coll_completed.load() == 0);
    CHECK(slot(cr).ops_completed.load() == 0);
    CHECK(slot(cr).coll_uncompleted.load() == 1);  // its own completion event pending: proven not completed
    CHECK(slot(cr).coll_unreached.load() == 0);
    CHECK(record(op.ref).t_reached_ns.load() != 0);
    CHECK(record(op.ref).t_done_ns.load() == 0);
    const uint64_t before = now_mono_ns();
    fakecuda_hold(s, 0);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 1; }, "ops_completed 1");
    x.full_pass();  // the progress time is flushed after the count
    CHECK(slot(cr).coll_completed.load() == 1);
    CHECK(slot(cr).t_last_progress_ns.load() >= before);
    CHECK(record(op.ref).t_done_ns.load() >= before);
    CHECK(slot(cr).coll_uncompleted.load() == 0);  // stated anew each pass: nothing pending proves anything
    CHECK(op.claim->owner.load() == 0);            // the sample resolved: the stream's next op is sampled
}

// A destroyed communicator's runtime is reused for a later one only once no pending event of the poller's refers to
// it (comm_pool.h): the poller holds it from the pass that takes the event to the end of the pass that resolves it.
TEST_CASE("a pending event holds its communicator's runtime until the pass that resolved it is over") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    fakecuda_hold(s, 1);
    issue(cr, s, past());
    Tracked::wait_until([&] { return slot(cr).coll_reached.load() == 1; }, "coll_reached 1");
    x.full_pass();
    CHECK(cr.holds.load() > 0);  // its completed event waits behind the kernel
    fakecuda_hold(s, 0);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 1; }, "ops_completed 1");
    x.full_pass();
    CHECK(cr.holds.load() == 0);
}

TEST_CASE("followers are completed by the next event on their stream that completes") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm(false);  // no catch-up events: only the ops' own
    const cudaStream_t s = stream_of(cr);
    HoldFile hold(x.hold_file, 0);
    const uint64_t t = past();
    const uint64_t catch_ups = x.rt->tracker->catch_ups();
    const Issued a = issue(cr, s, t);                     // sampled: reached, kernel 1, completed
    const Issued b = issue(cr, s, t + 100000);            // 0.1 ms later: follows a
    const Issued c = issue(cr, s, t + 100000 + 2 * kMs);  // after a pause: sampled, its events after kernel 2
    REQUIRE(a.smp.gen != 0);
    REQUIRE(b.smp.gen == 0);
    REQUIRE(c.smp.gen != 0);
    CHECK(b.claim == a.claim);
    CHECK(a.claim->followers.load() == 1);
    CHECK((record(b.ref).flags & disk::kFlagSampledOut) != 0);
    // The GPU finished kernel 1: a is complete; b's kernel is not, and no event after it has completed.
    hold.set(1);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 1; }, "a completed");
    x.full_pass();
    CHECK(slot(cr).ops_completed.load() == 1);
    CHECK(slot(cr).coll_completed.load() == 1);
    CHECK(slot(cr).coll_reached.load() == 1);
    // Kernel 2 done: c's "reached" event, recorded after b, completes and covers it.
    hold.set(2);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 2; }, "b completed");
    CHECK(slot(cr).coll_completed.load() == 2);
    CHECK(slot(cr).coll_reached.load() == 3);
    CHECK(a.claim->credited.load() == 1);
    // b's record gets its completion time from the poller's scan of the ring.
    Tracked::wait_until([&] { return record(b.ref).t_done_ns.load() != 0; }, "b's record stamped");
    CHECK(record(c.ref).t_done_ns.load() == 0);
    hold.set(3);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 3; }, "c completed");
    CHECK(slot(cr).coll_completed.load() == 3);
    CHECK(x.rt->tracker->catch_ups() == catch_ups);
}

TEST_CASE("pending events prove ops not reached and not completed, until they complete") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    fakecuda_hold(s, 1);
    const uint64_t t = past();
    issue(cr, s, t);
    issue(cr, s, t + 2 * kMs);  // sampled too (a pause): its "reached" event waits behind kernel 1
    Tracked::wait_until([&] { return slot(cr).coll_uncompleted.load() == 1 && slot(cr).coll_unreached.load() == 2; },
                        "the proofs: #1 not completed, #2 not reached");
    x.full_pass();  // the pass that wrote them may not have flushed its completions yet
    CHECK(slot(cr).coll_reached.load() == 1);
    CHECK(slot(cr).coll_completed.load() == 0);
    fakecuda_hold(s, 0);
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 2; }, "both completed");
    x.full_pass();
    CHECK(slot(cr).coll_unreached.load() == 0);
    CHECK(slot(cr).coll_uncompleted.load() == 0);
    CHECK(slot(cr).coll_reached.load() == 2);
    CHECK(slot(cr).coll_completed.load() == 2);
}

TEST_CASE("a stream gone quiet with followers uncovered gets a catch-up event") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    const uint64_t catch_ups = x.rt->tracker->catch_ups();
    const uint64_t t = past();
    issue(cr, s, t);
    const Issued b = issue(cr, s, t + 1000);
    REQUIRE(b.smp.gen == 0);
    // Nothing after b: once the stream has been quiet for kCatchUpAfterNs, the poller covers it.
    Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 2; }, "b completed by a catch-up");
    CHECK(x.rt->tracker->catch_ups() > catch_ups);
    CHECK(slot(cr).coll_completed.load() == 2);
    Tracked::wait_until([&] { return record(b.ref).t_done_ns.load() != 0; }, "b's record stamped");
}

TEST_CASE("a failed call is counted failed and releases its sample; a call without a pool completes on return") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    StreamClaim* claim = cr.claim_for(s);
    const uint64_t t = now_mono_ns();
    const CompletionTracker::Sampling smp = CompletionTracker::sample(claim, t, false, 8);
    REQUIRE(smp.gen != 0);
    const OpRef ref = record_issue(x.rt->file, cr, coll(disk::OpType::AllReduce, 8, s), IssueOptions{}, t);
    record_return(x.rt->file, ref, ncclUnhandledCudaError, t + 10);
    complete_after_return(*x.rt, cr, ref, s, x.pool, claim, smp.gen, ncclUnhandledCudaError, t + 10, After::Event);
    CHECK(claim->owner.load() == 0);
    CHECK(claim->samples.load() == 0);
    CHECK(cr.failed_ops.load() == 1);
    CHECK(slot(cr).ops_failed.load() == 1);
    CHECK(slot(cr).ops_completed.load() == 0);
    // No pool (no CUDA for this communicator, or graph capture): done on return.
    const OpRef ref2 = record_issue(x.rt->file, cr, coll(disk::OpType::AllReduce, 8, s), IssueOptions{}, t + 20);
    complete_after_return(*x.rt, cr, ref2, s, nullptr, nullptr, 0, ncclSuccess, t + 30, After::Return);
    CHECK(slot(cr).ops_completed.load() == 1);
    CHECK(slot(cr).t_last_progress_ns.load() == t + 30);
}

TEST_CASE("a teardown settles the last followers itself; a cover not complete yet is left to the poller") {
    Tracked& x = tracked();
    SECTION("complete: credited and stamped when settle_end returns") {
        CommRuntime& cr = x.comm();
        cr.destroyed.store(true);  // torn down: the poller leaves its streams to the settle
        const cudaStream_t s = stream_of(cr);
        const uint64_t t = past();
        const Issued a = issue(cr, s, t);
        const Issued b = issue(cr, s, t + 1000);
        REQUIRE(b.smp.gen == 0);
        CompletionTracker::Settle st = x.rt->tracker->settle_begin(cr);
        CHECK(st.n == 1);
        x.rt->tracker->settle_end(st);
        CHECK(a.claim->credited.load() == 1);
        CHECK(record(b.ref).t_done_ns.load() != 0);
        CHECK(slot(cr).ops_completed.load() >= 1);
        CHECK(st.n == 0);
    }
    SECTION("held: the poller credits it once the stream completes") {
        CommRuntime& cr = x.comm();
        cr.destroyed.store(true);
        const cudaStream_t s = stream_of(cr);
        fakecuda_hold(s, 1);
        const uint64_t t = past();
        const Issued a = issue(cr, s, t);
        issue(cr, s, t + 1000);
        const uint64_t catch_ups = x.rt->tracker->catch_ups();
        CompletionTracker::Settle st = x.rt->tracker->settle_begin(cr);
        REQUIRE(st.n == 1);
        x.rt->tracker->settle_end(st);
        CHECK(a.claim->credited.load() == 0);
        CHECK(x.rt->tracker->catch_ups() == catch_ups + 1);
        fakecuda_hold(s, 0);
        Tracked::wait_until([&] { return slot(cr).ops_completed.load() == 2; }, "both completed");
        CHECK(a.claim->credited.load() == 1);
    }
}

// Last: the drain request stays for the rest of the process (the poller catches up at once from then on).
TEST_CASE("drain at exit covers the followers before it returns, and never waits long for a stuck GPU") {
    Tracked& x = tracked();
    CommRuntime& cr = x.comm();
    const cudaStream_t s = stream_of(cr);
    const cudaStream_t stuck = stream_of(cr, 1);
    fakecuda_hold(stuck, 1);
    const uint64_t t = past();
    issue(cr, s, t);
    const Issued b = issue(cr, s, t + 1000);
    issue(cr, stuck, t);
    const Issued d = issue(cr, stuck, t + 1000);
    REQUIRE(b.smp.gen == 0);
    REQUIRE(d.smp.gen == 0);
    const auto began = std::chrono::steady_clock::now();
    x.rt->tracker->drain_at_exit(2000);
    CHECK(std::chrono::steady_clock::now() - began < std::chrono::milliseconds(2000));
    // b's stream: covered and read by the drain's passes. The stuck stream: nothing completed, nothing waited for.
    CHECK(b.claim->credited.load() == 1);
    CHECK(d.claim->credited.load() == 0);
    CHECK(slot(cr).ops_completed.load() == 2);
    fakecuda_hold(stuck, 0);
}

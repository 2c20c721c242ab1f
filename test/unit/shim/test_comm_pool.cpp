// The reuse of destroyed communicators' runtimes (shim/record/comm_pool.h, issue 45): a churn of communicators through
// the real init (begin_comm, finish_comm) and the destroy's steps keeps a few CommRuntime objects, not one per
// communicator; a reused one starts its life as a new one (nothing of the communicator before it, its life counted,
// NCCL's reused pointer mapped to it); a retired one waits for every reader of ours (a pass under way, the poller's
// next whole pass, a hold, a host thread's walk, NCCL's profiler, a slot not detached yet), never waited on; the
// quarantine is bounded.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>

#include "shim/intercept/comm_lifecycle.h"
#include "shim/record/comm_pool.h"
#include "shim/record/runtime.h"
#include "shim/watch/comm_watch.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;

namespace {

ncclComm_t handle(uintptr_t v) { return reinterpret_cast<ncclComm_t>(v); }

// One rank's runtime as startup.cpp wires it (no threads: the test moves the readers' pass counters itself).
struct Rank {
    TempDir dir{"ncw_pool"};
    Runtime* rt = new Runtime;  // large; leaked, as the shim's
    PassCounter poller;
    Rank() {
        rt->file = create_rank_file(dir.path.string(), test_identity("pool"), 1024, 0);
        REQUIRE(rt->file.hdr != nullptr);
        rt->slots.bind(rt->file.comms, rt->file.hdr->max_comms, &rt->file.hdr->num_comms,
                       &rt->file.hdr->comms_unslotted);
        rt->slots.watch_passes(0, &rt->watchdog_pass);
        rt->slots.watch_passes(1, &poller);
        rt->comm_pool.watch_passes(CommPool::kPoller, &poller);
        rt->comm_pool.watch_passes(CommPool::kWatchdog, &rt->watchdog_reads);
        rt->comm_pool.watch_passes(CommPool::kDigest, &rt->digest_pass);
    }
    // ncclCommSplit's bookkeeping around a real call that made `comm` (hooks.cpp run_init).
    CommRuntime* init(uint64_t id, ncclComm_t comm) {
        CommInitInfo info;
        info.comm_id = id;
        info.event = disk::OpType::CommSplit;
        CommRuntime* cr = begin_comm(*rt, info);
        finish_comm(*rt, cr, comm, ncclSuccess);
        return cr;
    }
    // ncclCommDestroy's (hooks.cpp: end_comm, then release_slot after the real call).
    void destroy(ncclComm_t comm) {
        CommRuntime* cr = rt->comms.find(comm);
        REQUIRE(cr != nullptr);
        cr->slot.load()->state.store(uint32_t(disk::CommState::Destroyed));
        cr->destroyed.store(true);
        rt->comms.remove(comm);
        rt->slots.release(*cr);
        rt->comm_pool.retire(*cr, rt->slots);
    }
    void poller_pass() {
        poller.enter();
        poller.leave();
    }
};

// What an earlier life leaves behind that the next must not see: state the hot path, the poller and the profiler write.
void dirty(CommRuntime& cr) {
    cr.nccl_seq[1].store(5);
    cr.claims[0].key.store(0x77);
    cr.claims[0].followers.store(9);
    cr.coll_seq.store(11);
    cr.op_index.store(12);
    cr.split_counter.store(4);
    cr.failed_ops.store(2);
    for (uint32_t p = 0; p < cr.peer_slots; ++p) cr.send_seq[p].store(3), cr.recv_seq[p].store(3);
    cr.slot.load()->coll_issued.store(13);
    cr.slot.load()->ops_completed.store(14);
}

// A reused runtime is its new communicator's alone.
void check_fresh(const CommRuntime& cr, uint64_t id, ncclComm_t comm) {
    CHECK(cr.comm_id == id);
    CHECK(cr.comm == comm);
    CHECK(!cr.destroyed.load());
    CHECK(cr.holds.load() == 0);
    CHECK(cr.prof.load() == nullptr);
    CHECK(cr.nccl_seq[1].load() == 0);
    CHECK(cr.claims[0].key.load() == 0);
    CHECK(cr.claims[0].followers.load() == 0);
    CHECK(cr.coll_seq.load() == 0);
    CHECK(cr.op_index.load() == 0);
    CHECK(cr.split_counter.load() == 0);
    CHECK(cr.failed_ops.load() == 0);
    bool peers_zero = cr.peer_slots > 0;
    for (uint32_t p = 0; p < cr.peer_slots; ++p)
        peers_zero = peers_zero && !cr.send_seq[p].load() && !cr.recv_seq[p].load();
    CHECK(peers_zero);
    const disk::CommSlot* s = cr.slot.load();
    REQUIRE(s != nullptr);
    CHECK(s->comm_id == id);
    CHECK(s->coll_issued.load() == 0);
    CHECK(s->ops_completed.load() == 0);
    CHECK(s->state.load() == uint32_t(disk::CommState::Active));
    CHECK(s->generation.load() % 2 == 0);
}

// Churns `n` communicators after `alive` that live throughout; every 8th init NCCL hands back the pointer it freed
// last. Returns how many distinct runtimes served them.
size_t churn(Rank& r, int alive, int n) {
    std::vector<ncclComm_t> kept;
    for (int i = 0; i < alive; ++i) {
        kept.push_back(handle(0x100000 + 64 * uintptr_t(i)));
        r.init(0xa000 + uint64_t(i), kept.back());
    }
    std::map<CommRuntime*, uint64_t> life;  // each runtime's life when last seen
    ncclComm_t last = nullptr;
    for (int i = 0; i < n; ++i) {
        const ncclComm_t comm = last && i % 8 == 0 ? last : handle(0x900000 + 64 * uintptr_t(i));
        const uint64_t id = 0xb0000 + uint64_t(i);
        CommRuntime* cr = r.init(id, comm);
        if (auto it = life.find(cr); it != life.end()) CHECK(cr->life.load() == it->second + 1);
        life[cr] = cr->life.load();
        check_fresh(*cr, id, comm);
        CHECK(r.rt->comms.find(comm) == cr);  // NCCL's reused pointer names the new communicator
        if (last && last != comm) CHECK(r.rt->comms.find(last) == nullptr);
        dirty(*cr);
        r.destroy(comm);
        last = comm;
        // Our threads pass now and then, as they do between a real churn's inits.
        if (i % 8 == 7) r.poller_pass();
        if (i % 16 == 15) {
            r.rt->watchdog_reads.enter();
            r.rt->watchdog_reads.leave();
        }
    }
    return life.size();
}

}  // namespace

TEST_CASE("comm pool: 10,000 communicators made and destroyed reuse a few runtimes, each a new one's alone") {
    Rank r;
    const size_t used = churn(r, 3, 10000);
    // The live three, the released slots still taking late writes, those waiting for the poller's next pass.
    const uint64_t made = r.rt->comm_pool.made();
    INFO("made " << made << ", reused " << r.rt->comm_pool.reused());
    CHECK(made <= 3 + SlotTable::kAttachedAfterRelease + 16 + 2);
    CHECK(used <= made);
    CHECK(r.rt->comm_pool.reused() + made == 10003);
    CHECK(r.rt->comm_pool.let_go() == 0);
    CHECK(r.rt->slots.overflowed() == 0);
}

TEST_CASE("comm pool: past the file's comm slots, a reused runtime's own block is the new communicator's") {
    Rank r;
    const int alive = int(disk::kMaxComms);  // every file slot held: the churned ones are watched in memory
    churn(r, alive, 2000);
    CHECK(r.rt->slots.overflowed() == 2000);
    CHECK(r.rt->comm_pool.made() <= uint64_t(alive) + 16 + 2);
    // The list of communicators without a slot holds none of the destroyed ones: a reader never finds a reused
    // runtime under its earlier communicator.
    int listed = 0;
    r.rt->slots.for_each_unslotted([&](const CommRuntime&) { ++listed; });
    CHECK(listed == 0);
    CommRuntime* cr = r.init(0xcafe, handle(0x777000));
    CHECK(cr->slot.load() == cr->own_slot);
    r.rt->slots.for_each_unslotted([&](const CommRuntime& x) { CHECK(&x == cr); });
    check_fresh(*cr, 0xcafe, handle(0x777000));
}

TEST_CASE("comm pool: a retired runtime waits for every reader of ours that may still hold it") {
    Rank r;
    CommPool& pool = r.rt->comm_pool;
    // Detached and passed at once unless a case below says otherwise: release enough later ones first.
    auto retired = [&](uint64_t id) {
        const ncclComm_t comm = handle(0x500000 + 64 * id);
        CommRuntime* cr = r.init(id, comm);
        r.destroy(comm);
        for (uint64_t k = 1; k <= SlotTable::kAttachedAfterRelease; ++k) {  // detaches cr's slot
            r.init(id * 100 + k, handle(0x600000 + 64 * (id * 100 + k)));
            r.destroy(handle(0x600000 + 64 * (id * 100 + k)));
        }
        return cr;
    };
    auto next_is = [&](CommRuntime* cr) {
        CommRuntime* got = r.init(0xf000 + pool.made() + pool.reused(), handle(0xf00000 + 64 * pool.reused()));
        const bool same = got == cr;
        r.destroy(got->comm);
        return same;
    };
    auto drain = [&] {  // every waiting one reusable again: the poller has passed
        r.poller_pass();
        r.poller_pass();
    };

    SECTION("the poller's whole pass after the retirement: it also takes the events queued before") {
        r.poller.enter();  // mid-pass at the retirement
        CommRuntime* cr = retired(1);
        r.poller.leave();
        CHECK(!next_is(cr));  // that pass may have emptied the queue before cr's last events went in
        r.poller_pass();
        CHECK(next_is(cr));
    }
    SECTION("a hold of ours: not reused until it is let go") {
        drain();
        CommRuntime* cr = retired(2);
        r.poller_pass();
        cr->holds.fetch_add(1);  // a pending event of the poller, the watchdog's watch
        CHECK(!next_is(cr));
        r.poller_pass();
        CHECK(!next_is(cr));
        cr->holds.fetch_sub(1);
        CHECK(next_is(cr));
    }
    SECTION("the watchdog's walk of the registry under way at the retirement") {
        drain();
        r.rt->watchdog_reads.enter();
        CommRuntime* cr = retired(3);
        r.poller_pass();
        CHECK(!next_is(cr));
        r.rt->watchdog_reads.leave();
        CHECK(next_is(cr));
    }
    SECTION("the digest client's read under way at the retirement") {
        drain();
        r.rt->digest_pass.enter();
        CommRuntime* cr = retired(4);
        r.poller_pass();
        CHECK(!next_is(cr));
        r.rt->digest_pass.leave();
        CHECK(next_is(cr));
    }
    SECTION("a host thread's walk of the registry under way at the retirement (several at once)") {
        drain();
        auto* first = new CommPool::HostWalk(pool);
        CommRuntime* cr = retired(6);
        auto* second = new CommPool::HostWalk(pool);  // began after: cannot find cr, but keeps the count up
        delete first;
        r.poller_pass();
        CHECK(!next_is(cr));  // none seen over yet
        delete second;
        CHECK(next_is(cr));
    }
    SECTION("NCCL's profiler context not finalized") {
        drain();
        CommRuntime* cr = retired(5);
        r.poller_pass();
        auto* link = reinterpret_cast<ProfilerLink*>(uintptr_t(0x40));  // never dereferenced here
        cr->prof.store(link);
        CHECK(!next_is(cr));
        cr->prof.store(nullptr);
        CHECK(next_is(cr));
    }
    SECTION("its released file slot not detached yet: the detach writes into it") {
        drain();
        const ncclComm_t comm = handle(0x700000);
        CommRuntime* cr = r.init(0x70, comm);
        disk::CommSlot* in_file = cr->slot.load();
        r.destroy(comm);
        r.poller_pass();
        CHECK(cr->slot.load() == in_file);  // still taking its late writes
        for (uint64_t k = 1; k < SlotTable::kAttachedAfterRelease; ++k) {
            CommRuntime* other = r.init(0x7000 + k, handle(0x710000 + 64 * k));
            CHECK(other != cr);
            r.destroy(other->comm);
            r.poller_pass();
        }
        CHECK(cr->slot.load() == in_file);
        r.init(0x7100, handle(0x720000));  // the 8th released after it: detached now
        r.destroy(handle(0x720000));
        CHECK(cr->slot.load() == cr->own_slot);
        // The copy keeps its final state for our threads; reused, the runtime is the next communicator's.
        r.poller_pass();
        CHECK(next_is(cr));
    }
}

TEST_CASE("comm pool: a reader of ours that stops passing costs a bounded quarantine, then new runtimes") {
    Rank r;
    r.poller.enter();  // a poller stuck in the driver for good
    for (uint32_t i = 0; i < CommPool::kQuarantine + 10; ++i) {
        r.init(i + 1, handle(0x200000 + 64 * uintptr_t(i)));
        r.destroy(handle(0x200000 + 64 * uintptr_t(i)));
    }
    CHECK(r.rt->comm_pool.waiting() == CommPool::kQuarantine);
    CHECK(r.rt->comm_pool.let_go() == 10);
    CHECK(r.rt->comm_pool.reused() == 0);
    r.poller.leave();
    r.poller_pass();
    r.init(0x999, handle(0x999000));
    CHECK(r.rt->comm_pool.reused() == 1);
}

TEST_CASE("comm pool: an init that failed gives its runtime back") {
    Rank r;
    CommInitInfo info;
    info.comm_id = 0x51;
    CommRuntime* cr = begin_comm(*r.rt, info);
    finish_comm(*r.rt, cr, nullptr, ncclSystemError);
    for (uint64_t k = 1; k <= SlotTable::kAttachedAfterRelease; ++k) {  // its slot detached
        r.init(0x5100 + k, handle(0x510000 + 64 * k));
        r.destroy(handle(0x510000 + 64 * k));
    }
    r.poller_pass();
    r.poller_pass();
    std::set<CommRuntime*> next;
    for (int i = 0; i < 12; ++i) next.insert(r.init(0x5200 + uint64_t(i), handle(0x520000 + 64 * uintptr_t(i))));
    CHECK(next.count(cr) == 1);
}

TEST_CASE("comm watch: the watchdog's watch holds its communicator's runtime, one hold per watch") {
    CommRuntime a, b;
    {
        CommWatch w;
        w.watch(&a);
        w.watch(&a);
        CHECK(a.holds.load() == 1);
        w.watch(&b);
        CHECK(a.holds.load() == 0);
        CHECK(b.holds.load() == 1);
        CHECK(w.said_nothing());
        w.last_mismatch_seq = 3;
        CHECK(!w.said_nothing());
    }
    CHECK(b.holds.load() == 0);  // forgotten with the watch
}

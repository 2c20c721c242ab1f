// The comm slot table (shim/record/comm_slots.h): reuse of destroyed communicators' slots, the order of reuse, our
// threads' passes (a slot one may still hold is passed over, never waited for), and a reader that never sees a slot
// as a mix of two communicators.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "shim/record/comm_registry.h"
#include "shim/record/comm_slots.h"
#include "ncclwatch/format.h"
#include "shim/record/rank_file_writer.h"
#include "read/rank_file.h"
#include "temp_dir.h"

using namespace ncw;

namespace {

struct Table {
    std::vector<disk::CommSlot> slots = std::vector<disk::CommSlot>(disk::kMaxComms);
    std::atomic<uint32_t> num_comms{0};
    SlotTable t;
    Table() { t.bind(slots.data(), disk::kMaxComms, &num_comms); }
};

// What begin_comm does with a slot: acquire, identity, publish.
CommRuntime* take(SlotTable& t, uint64_t id) {
    auto* cr = new CommRuntime;  // leaked, as in the shim
    cr->comm_id = id;
    uint16_t idx = 0xffff;
    disk::CommSlot* s = t.acquire(cr, idx);
    if (s) {
        s->comm_id = id;
        s->rank = int32_t(id);
        s->nranks = int32_t(id * 3);
        s->split_color = int32_t(id * 5);
        s->coll_issued.store(id * 7);
        s->state.store(uint32_t(disk::CommState::Active));
        SlotTable::publish(*s);
    }
    cr->slot.store(s);
    cr->slot_index = idx;
    return cr;
}

// A full table whose reuse our two threads' passes gate: every slot held by a live communicator (ids 1..64).
struct WatchedTable {
    Table tb;
    PassCounter poller, watchdog;
    std::vector<CommRuntime*> live;
    WatchedTable() {
        tb.t.watch_passes(0, &poller);
        tb.t.watch_passes(1, &watchdog);
        for (uint64_t i = 0; i < disk::kMaxComms; ++i) live.push_back(take(tb.t, i + 1));
    }
};

}  // namespace

TEST_CASE("comm slots: never-used slots first, then the least recently released; none left is overflow") {
    Table tb;
    std::vector<CommRuntime*> live;
    for (uint64_t i = 0; i < disk::kMaxComms; ++i) {
        live.push_back(take(tb.t, 100 + i));
        CHECK(live.back()->slot_index == i);
    }
    CHECK(tb.num_comms.load() == disk::kMaxComms);
    CommRuntime* over = take(tb.t, 999);
    CHECK(over->slot.load() == nullptr);
    CHECK(over->slot_index == 0xffff);
    CHECK(tb.t.overflowed() == 1);

    tb.t.release(*live[7]);
    tb.t.release(*live[3]);
    // Until the slot is needed, a released communicator's late writes (the poller's last completions) land in it.
    CHECK(live[7]->slot.load() == &tb.slots[7]);
    live[7]->slot.load()->ops_completed.store(9);
    CHECK(tb.slots[7].generation.load() == 2);

    CommRuntime* a = take(tb.t, 500);
    CHECK(a->slot_index == 7);  // released first
    // Detached at the reuse: the old communicator writes into its own copy, which kept its final state.
    CHECK(live[7]->slot.load() != &tb.slots[7]);
    CHECK(live[7]->slot.load()->coll_issued.load() == 107 * 7);
    CHECK(live[7]->slot.load()->ops_completed.load() == 9);
    live[7]->slot.load()->coll_issued.store(1);
    CHECK(tb.slots[7].comm_id == 500);
    CHECK(tb.slots[7].coll_issued.load() == 500 * 7);
    CHECK(tb.slots[7].generation.load() == 4);
    CHECK(tb.slots[7].ops_issued.load() == 0);  // nothing of the old communicator is left
    CommRuntime* b = take(tb.t, 501);
    CHECK(b->slot_index == 3);
    CHECK(take(tb.t, 502)->slot.load() == nullptr);
    CHECK(tb.num_comms.load() == disk::kMaxComms);

    tb.t.release(*live[3]);  // no longer its slot: ignored
    CHECK(b->slot.load() == &tb.slots[3]);
}

TEST_CASE("comm slots: a slot is reused only once each of our threads left the pass it was in at the release") {
    WatchedTable w;
    Table& tb = w.tb;
    PassCounter &poller = w.poller, &watchdog = w.watchdog;
    std::vector<CommRuntime*>& live = w.live;

    tb.t.release(*live[0]);
    poller.enter();  // the poller is mid-pass at the reuse and may hold slot 0's pointer: the init passes it over
    CHECK(take(tb.t, 70)->slot.load() == nullptr);
    CHECK(live[0]->slot.load() != &tb.slots[0]);  // detached all the same: the next init need not wait for it
    watchdog.enter();  // a pass that began after the release sees the copy: no reason to wait for it
    poller.leave();
    CommRuntime* c = take(tb.t, 71);
    CHECK(c->slot_index == 0);
    watchdog.leave();

    // Idle at the release: reusable at once.
    tb.t.release(*live[1]);
    CHECK(take(tb.t, 72)->slot_index == 1);
}

// Communicators made and destroyed one after another while a watchdog poll of ours runs long (a mismatch check
// reading the siblings' files under load): the e2e comms_churn overflowed every init of that poll when slots were
// detached only at their reuse.
TEST_CASE("comm slots: a churn of communicators through one long pass of ours still reuses slots") {
    WatchedTable w;
    Table& tb = w.tb;
    PassCounter& watchdog = w.watchdog;
    std::vector<CommRuntime*>& live = w.live;
    for (CommRuntime* cr : live) tb.t.release(*cr);
    // Detached ahead: all but the last few destroyed; those keep taking their late writes.
    CHECK(live[0]->slot.load() != &tb.slots[0]);
    CHECK(live.back()->slot.load() == &tb.slots[disk::kMaxComms - 1]);

    watchdog.enter();  // one long poll: every communicator below is made and destroyed inside it
    const uint32_t n = disk::kMaxComms - SlotTable::kAttachedAfterRelease;
    std::vector<uint16_t> got;
    for (uint64_t i = 0; i < n; ++i) {
        CommRuntime* c = take(tb.t, 1000 + i);
        got.push_back(c->slot_index);
        if (c->slot.load()) tb.t.release(*c);
    }
    watchdog.leave();
    CHECK(tb.t.overflowed() == 0);
    for (uint64_t i = 0; i < n; ++i) CHECK(got[i] == i);  // the least recently destroyed first
}

TEST_CASE("comm slots: a reader never sees a reused slot as a mix of two communicators") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 0;
    id.host = "node-s";
    id.pid = getpid();
    id.job_id = "slotjob";
    RankFileWriter w = create_rank_file(dir.path.string(), id, disk::kMinRingCapacity, 0);
    REQUIRE(w.file_backed);
    SlotTable t;
    t.bind(w.comms, w.hdr->max_comms, &w.hdr->num_comms);

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> reused{0};
    std::thread writer([&] {
        std::vector<CommRuntime*> live;
        uint64_t next = 1;
        while (!stop.load()) {
            if (live.size() >= disk::kMaxComms) {
                // Release a few from the middle and the front, as groups do.
                t.release(*live[next % live.size()]);
                live.erase(live.begin() + long(next % live.size()));
            }
            CommRuntime* cr = take(t, next++);
            if (cr->slot.load()) live.push_back(cr);
            if (next > disk::kMaxComms) reused.fetch_add(1);
        }
    });
    RankFile f;
    REQUIRE(f.open(w.path));
    uint64_t seen = 0, mixed = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    while (std::chrono::steady_clock::now() < end) {
        for (const CommInfo& c : f.comms()) {
            if (c.state == uint32_t(disk::CommState::Free)) continue;  // the first rewrite, not yet published
            ++seen;
            const bool ok = c.rank == int32_t(c.comm_id) && c.nranks == int32_t(c.comm_id * 3) &&
                            c.split_color == int32_t(c.comm_id * 5) &&
                            (c.coll_issued == c.comm_id * 7 || c.coll_issued == 0);
            if (!ok) ++mixed;
        }
    }
    stop.store(true);
    writer.join();
    CHECK(reused.load() > 1000);
    CHECK(seen > 1000);
    CHECK(mixed == 0);
}

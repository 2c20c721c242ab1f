// The host synchronisations' proofs: the tables the CUDA runtime hooks write (shim/record/sync_proofs.h), and the
// poller's look-up of the ops behind a cut in the ring (shim/complete/sync_apply.h), one thread.
#include <catch2/catch.hpp>

#include "shim/complete/sync_apply.h"
#include "shim/record/recorder.h"
#include "shim/record/sync_proofs.h"
#include "shim_fixtures.h"
#include "temp_dir.h"

using namespace ncw;
using namespace shim_fixtures;
using disk::OpType;

namespace {

constexpr uintptr_t kNcclStream = 0x5000, kCompute = 0x6000, kOther = 0x7000;
constexpr uintptr_t kEvent = 0x9100, kEvent2 = 0x9200;
constexpr uint32_t kTid = 77;

bool has(const SyncCutSet& s, uintptr_t stream, uint32_t tid, uint64_t t) {
    for (int i = 0; i < s.n; ++i)
        if (s.cut[i].stream == stream && s.cut[i].tid == tid && s.cut[i].t_ns == t) return true;
    return false;
}

}  // namespace

TEST_CASE("sync proofs: a cut set keeps the newest cut per stream and thread") {
    SyncCutSet s;
    s.add(SyncCut{kNcclStream, kTid, 100});
    s.add(SyncCut{kNcclStream, kTid, 50});  // older: nothing new
    s.add(SyncCut{kNcclStream, kTid, 200});
    s.add(SyncCut{kNcclStream, kTid + 1, 10});
    CHECK(s.n == 2);
    CHECK(has(s, kNcclStream, kTid, 200));
    for (uintptr_t k = 1; k <= 4; ++k) s.add(SyncCut{kOther + k, kTid, 300 + k});
    CHECK(s.n == SyncCutSet::kMax);  // full: the oldest went first
    CHECK(!has(s, kNcclStream, kTid + 1, 10));
    CHECK(has(s, kOther + 4, kTid, 304));
}

TEST_CASE("sync proofs: torch's wait, an event on the NCCL stream that the compute stream waits for") {
    SyncProofs sp;
    SyncCutSet cuts;
    // Before any NCCL op was seen on the stream, an event there stands for nothing.
    sp.event_recorded(kEvent, kNcclStream, kTid, 1000);
    CHECK(!sp.cuts_of_event(kEvent, cuts));
    sp.note_nccl_stream(kNcclStream);
    CHECK(sp.is_nccl_stream(kNcclStream));
    CHECK(!sp.is_nccl_stream(kCompute));

    sp.event_recorded(kEvent, kNcclStream, kTid, 1000);
    REQUIRE(sp.cuts_of_event(kEvent, cuts));
    CHECK(has(cuts, kNcclStream, kTid, 1000));
    sp.stream_waits(kCompute, kEvent);
    // A synchronisation of the compute stream proves the NCCL stream's ops before the record; the compute stream's
    // own cut is not taken (no NCCL op on it).
    REQUIRE(sp.cuts_of_stream(kCompute, kTid, 5000, cuts));
    CHECK(cuts.n == 1);
    CHECK(has(cuts, kNcclStream, kTid, 1000));

    SECTION("a later record and wait raise the cut") {
        sp.event_recorded(kEvent, kNcclStream, kTid, 2000);
        sp.stream_waits(kCompute, kEvent);
        REQUIRE(sp.cuts_of_stream(kCompute, kTid, 5000, cuts));
        CHECK(has(cuts, kNcclStream, kTid, 2000));
    }
    SECTION("an event recorded on a stream that waited stands for what it waited for") {
        sp.event_recorded(kEvent2, kCompute, kTid, 3000);
        REQUIRE(sp.cuts_of_event(kEvent2, cuts));
        CHECK(has(cuts, kNcclStream, kTid, 1000));
    }
    SECTION("re-recorded where it stands for nothing: it proves nothing any more") {
        sp.event_recorded(kEvent, kOther, kTid, 3000);
        CHECK(!sp.cuts_of_event(kEvent, cuts));
    }
    SECTION("a destroyed stream's handle starts afresh") {
        sp.stream_destroyed(kCompute);
        CHECK(!sp.cuts_of_stream(kCompute, kTid, 5000, cuts));
    }
    SECTION("a synchronisation of the NCCL stream itself: its own ops up to the call") {
        REQUIRE(sp.cuts_of_stream(kNcclStream, kTid, 5000, cuts));
        CHECK(has(cuts, kNcclStream, kTid, 5000));
        CHECK(!sp.cuts_of_stream(kNcclStream, kTid, 5000, cuts, false));  // inside an open group: its ops wait
    }
}

TEST_CASE("sync proofs: a proof is queued once, for the poller") {
    SyncProofs sp;
    SyncCutSet cuts;
    cuts.add(SyncCut{kNcclStream, kTid, 1000});
    sp.proven(cuts);
    sp.proven(cuts);  // the same again (torch's watchdog querying one event): not queued twice
    SyncCutSet out;
    REQUIRE(sp.pop(out));
    CHECK(has(out, kNcclStream, kTid, 1000));
    CHECK(!sp.pop(out));
    CHECK(sp.proofs_queued() == 1);
}

TEST_CASE("sync apply: a cut names the newest op of its thread on its stream before its time, per communicator") {
    TempDir dir{"ncw_sync_apply"};
    RankFileWriter f = create_rank_file(dir.path.string(), test_identity("synctest"), 256, 0);
    REQUIRE(f.file_backed);
    CommRuntime* a = make_comm(f, 0xa, 0, 0, 2);
    CommRuntime* b = make_comm(f, 0xb, 1, 0, 2);
    IssueOptions mine, other;
    mine.tid = kTid;
    other.tid = kTid + 1;
    auto issue = [&](CommRuntime* cr, const OpDesc& d, const IssueOptions& o, uint64_t t,
                     ncclResult_t r = ncclSuccess) {
        const OpRef ref = record_issue(f, *cr, d, o, t);
        record_return(f, ref, r, t);
        return ref;
    };
    const auto s = reinterpret_cast<cudaStream_t>(kNcclStream);
    issue(a, coll(OpType::AllReduce, 8, s), mine, 100);                                       // a #1
    issue(a, p2p(OpType::Send, 1, s), mine, 110);                                             // a op 2
    issue(b, coll(OpType::AllReduce, 8, s), mine, 120);                                       // b #1
    issue(a, coll(OpType::AllReduce, 8, reinterpret_cast<cudaStream_t>(kOther)), mine, 130);  // another stream
    issue(a, coll(OpType::AllReduce, 8, s), other, 140);                                      // another thread
    issue(a, coll(OpType::AllReduce, 8, s), mine, 150, ncclUnhandledCudaError);  // failed: enqueued nothing
    issue(a, coll(OpType::AllReduce, 8, s), mine, 300);                          // after the cut

    auto proven = SyncApply::resolve(f, SyncCut{kNcclStream, kTid, 200}, 1000);
    REQUIRE(proven.size() == 2);
    const auto& pa = proven[0].comm_id == 0xa ? proven[0] : proven[1];
    const auto& pb = proven[0].comm_id == 0xb ? proven[0] : proven[1];
    CHECK(pa.coll_seq == 1);
    CHECK(pa.op_index == 2);  // the send after it
    CHECK(pb.coll_seq == 1);
    CHECK(pb.op_index == 1);

    SECTION("a device synchronisation: every stream of the thread") {
        auto all = SyncApply::resolve(f, SyncCut{kAnyStream, kTid, 200}, 1000);
        for (const auto& p : all)
            if (p.comm_id == 0xa) CHECK((p.op_index == 3 && p.coll_seq == 2));  // the other stream's op too
    }
    SECTION("a cut before every op proves nothing") {
        CHECK(SyncApply::resolve(f, SyncCut{kNcclStream, kTid, 50}, 1000).empty());
    }
}

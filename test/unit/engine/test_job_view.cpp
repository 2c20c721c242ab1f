// The job view: rank files grouped into jobs and communicators, fed to the verdict engine.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "read/rank_file.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace ncw;
using disk::OpType;

constexpr uint64_t kSec = 1'000000000ull;

// What one process's file says about its one comm rank.
struct RankSpec {
    std::string job = "job-1";
    std::string host = "node-a";
    uint64_t boot = 0xB007;
    int64_t pid = 100;
    int global_rank = 0;
    uint64_t comm_id = 0xC0;
    int rank = 0;
    int nranks = 2;
    uint64_t issued = 0;
    uint64_t completed = 0;
    uint64_t issued_written = 0;  // coll_issued as written, when not `issued` (a damaged or forged counter; 0: issued)
    uint64_t start_mono = 1000 * kSec;
    uint64_t start_real = 1'700'000'000 * kSec;
    uint64_t heartbeat = 1100 * kSec;  // on this file's monotonic clock
    uint64_t last_issue = 0;
    uint64_t last_progress = 0;
    uint32_t process_state = uint32_t(disk::ProcessState::Running);
    uint64_t odd_count_at = 0;  // seq whose count differs (0 = none)
    uint64_t stall_since = 0;   // the shim reported a stall since then (0 = none)
    disk::EndKind end_kind = disk::EndKind::None;
    int32_t end_status = 0;
    uint64_t end_mono = 0;
    int32_t async_error = 0;
    struct P2p {
        OpType op;
        int peer;
        uint64_t seq;
        bool done;
        uint64_t t_issue;  // on this file's clock
    };
    std::vector<P2p> p2p;  // ring records, in ticket order
};

// A minimal valid rank file holding one comm slot.
void write_rank(const std::string& path, const RankSpec& s) {
    const auto l = disk::compute_layout(disk::kMinRingCapacity, 2, 0);
    std::vector<uint64_t> words(l.file_size / 8, 0);
    auto* base = reinterpret_cast<unsigned char*>(words.data());
    auto* h = new (base) disk::FileHeader{};
    disk::init_header(*h, l);
    disk::seal_header(*h);
    h->pid = s.pid;
    h->global_rank = s.global_rank;
    std::snprintf(h->host, sizeof h->host, "%s", s.host.c_str());
    std::snprintf(h->job_id, sizeof h->job_id, "%s", s.job.c_str());
    h->start_mono_ns = s.start_mono;
    h->start_real_ns = s.start_real;
    h->boot_id_hash = s.boot;
    h->heartbeat_mono_ns = s.heartbeat;
    h->process_state = s.process_state;
    h->num_comms = 1;
    h->end_status = s.end_status;
    h->end_mono_ns = s.end_mono;
    h->end_kind = uint32_t(s.end_kind);

    auto* c = new (base + l.comm_table_offset) disk::CommSlot{};
    c->state = uint32_t(disk::CommState::Active);
    c->rank = s.rank;
    c->nranks = s.nranks;
    c->comm_id = s.comm_id;
    c->gpu_tracking = 1;
    c->coll_issued = s.issued_written ? s.issued_written : s.issued;
    c->coll_returned = s.issued;
    c->coll_reached = s.issued;
    c->coll_completed = s.completed;
    c->ops_issued = s.issued;
    c->ops_completed = s.completed;
    c->t_last_issue_ns = s.last_issue;
    c->t_last_progress_ns = s.last_progress;
    c->stall_since_ns = s.stall_since;
    c->async_error = s.async_error;
    for (uint64_t q = 1; q <= s.issued; ++q) {
        auto& e = c->recent[q % disk::kRecentSigs];
        e.count = q == s.odd_count_at ? 999 : 1024;
        e.t_issue_ns = s.start_mono + q * kSec;
        e.op = uint8_t(OpType::AllReduce);
        e.dtype = 7;
        e.root = -1;
        e.seq = q;
    }
    for (size_t t = 0; t < s.p2p.size(); ++t) {
        const auto& p = s.p2p[t];
        auto* r = new (base + l.ring_offset + t * sizeof(disk::OpRecord)) disk::OpRecord{};
        r->comm_id = s.comm_id;
        r->seq = p.seq;
        r->op = uint8_t(p.op);
        r->peer_or_root = p.peer;
        r->count = 16;
        r->dtype = 7;
        r->t_issue_ns = p.t_issue;
        r->t_return_ns = p.t_issue + 1000;
        r->t_done_ns = p.done ? p.t_issue + 2000 : 0;
        r->result = 0;
        r->stamp = 2 * t + 2;
        (p.op == OpType::Send ? c->p2p_sends : c->p2p_recvs) += 1;
        c->ops_issued += 1;
        c->ops_completed += p.done ? 1 : 0;
    }
    h->write_ticket = s.p2p.size();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(words.data()), std::streamsize(l.file_size));
}

// Rank 0 waits in #5 since t=96 s; rank 1 completed #4 and never issued #5. Both heartbeat at t=100 s.
std::pair<RankSpec, RankSpec> two_ranks_one_missing_op() {
    RankSpec r0;
    r0.rank = 0;
    r0.global_rank = 0;
    r0.pid = 100;
    r0.issued = 5;
    r0.completed = 4;
    r0.last_issue = 1096 * kSec;
    r0.last_progress = 1095 * kSec;
    RankSpec r1 = r0;
    r1.rank = 1;
    r1.global_rank = 1;
    r1.pid = 101;
    r1.issued = 4;
    r1.completed = 4;
    r1.last_issue = 1094 * kSec;
    r1.last_progress = 1095 * kSec;
    return {r0, r1};
}

const verdict::Verdict* find_kind(const CommResult& c, verdict::Kind k) {
    for (const auto& v : c.verdicts)
        if (v.kind == k) return &v;
    return nullptr;
}

bool has_warning(const Analysis& a, const std::string& needle) {
    for (const auto& w : a.warnings)
        if (w.find(needle) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("a rank that never issued #5 is NOT_JOINED", "[job_view]") {
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);

    AnalysisOptions opt;  // offline, timeout 0
    const Analysis a = analyze_paths({dir.file("r0.ncw"), dir.file("r1.ncw")}, opt);
    CHECK(a.files_read == 2);
    REQUIRE(a.jobs.size() == 1);
    const JobResult& j = a.jobs[0];
    CHECK(j.job_id == "job-1");
    CHECK(j.now_mono_ns == 1100 * kSec);  // the newest heartbeat
    CHECK(j.now_real_ns == 1'700'000'100 * kSec);
    REQUIRE(j.comms.size() == 1);
    const CommResult& c = j.comms[0];
    CHECK(c.comm_id == 0xC0);
    CHECK(c.view.nranks == 2);
    REQUIRE(c.view.ranks.size() == 2);
    CHECK(c.view.ranks[0].comm_rank == 0);
    CHECK(c.view.ranks[1].comm_rank == 1);
    CHECK(c.view.ranks[1].alive);
    CHECK(c.missing.empty());

    const verdict::Verdict* v = find_kind(c, verdict::Kind::NotJoined);
    REQUIRE(v != nullptr);
    CHECK(v->seq == 5);
    CHECK(v->culprits == std::vector<int>{1});
    CHECK(v->waiting == std::vector<int>{0});
    CHECK(a.found_problem());
    REQUIRE_FALSE(a.all_verdicts().empty());
    CHECK(a.all_verdicts().front().verdict->kind == verdict::Kind::NotJoined);

    // The same files with a timeout longer than the wait: nothing stalled yet.
    opt.timeout_s = 10;
    CHECK_FALSE(analyze_paths({dir.file("r0.ncw"), dir.file("r1.ncw")}, opt).found_problem());
}

// Issue 28, point 3: a counter no process could have written (coll_issued 2^64-1) is named, and that file's claims on
// that communicator are set aside, whichever rank holds it: it never turns NOT_JOINED into another verdict.
TEST_CASE("an impossible counter is named and its file's claims on the communicator set aside", "[job_view]") {
    TempDir dir;
    auto [r0, r2] = two_ranks_one_missing_op();
    r0.nranks = r2.nranks = 3;
    RankSpec r1 = r0;
    r1.rank = r1.global_rank = 1;
    r1.pid = 101;
    r2.rank = r2.global_rank = 2;
    r2.pid = 102;
    const std::vector<std::string> paths = {dir.file("r0.ncw"), dir.file("r1.ncw"), dir.file("r2.ncw")};
    AnalysisOptions opt;

    SECTION("on a waiting rank: rank 2 is still NOT_JOINED, proven by the other two") {
        r1.issued_written = ~0ull;
        write_rank(paths[0], r0), write_rank(paths[1], r1), write_rank(paths[2], r2);
        const Analysis a = analyze_paths(paths, opt);
        CHECK(has_warning(a, dir.file("r1.ncw") +
                                 ": comm 0x00000000000000c0: coll_issued 18446744073709551615 is more than any "
                                 "process could have issued; this file's claims on it are set aside"));
        REQUIRE(a.jobs.size() == 1);
        REQUIRE(a.jobs[0].comms.size() == 1);
        const CommResult& c = a.jobs[0].comms[0];
        CHECK(c.missing == std::vector<int>{1});
        const verdict::Verdict* v = find_kind(c, verdict::Kind::NotJoined);
        REQUIRE(v != nullptr);
        CHECK(v->culprits == std::vector<int>{2});
        CHECK(find_kind(c, verdict::Kind::StuckInNccl) == nullptr);
    }
    SECTION("under 2^52, but more than its process's life allows (issue 45: 2^40 in a process 100 s old)") {
        r1.issued_written = uint64_t(1) << 40;
        write_rank(paths[0], r0), write_rank(paths[1], r1), write_rank(paths[2], r2);
        const Analysis a = analyze_paths(paths, opt);
        CHECK(has_warning(a, dir.file("r1.ncw") + ": comm 0x00000000000000c0: coll_issued 1099511627776 is more than "
                                                  "its process could have issued in its life so far (at most "
                                                  "100001048576); this file's claims on it are set aside"));
        const CommResult& c = a.jobs.at(0).comms.at(0);
        const verdict::Verdict* v = find_kind(c, verdict::Kind::NotJoined);
        REQUIRE(v != nullptr);
        CHECK(v->culprits == std::vector<int>{2});
    }
    SECTION("on the rank behind: it is not believed ahead, and nobody else is blamed") {
        r2.issued_written = ~0ull;
        write_rank(paths[0], r0), write_rank(paths[1], r1), write_rank(paths[2], r2);
        const Analysis a = analyze_paths(paths, opt);
        CHECK(has_warning(a, dir.file("r2.ncw") + ": comm 0x00000000000000c0: coll_issued 18446744073709551615"));
        REQUIRE(a.jobs.size() == 1);
        const CommResult& c = a.jobs[0].comms[0];
        CHECK(c.missing == std::vector<int>{2});
        CHECK(find_kind(c, verdict::Kind::StuckInNccl) == nullptr);
        for (const auto& v : c.verdicts) {
            CHECK(std::find(v.culprits.begin(), v.culprits.end(), 0) == v.culprits.end());
            CHECK(std::find(v.culprits.begin(), v.culprits.end(), 1) == v.culprits.end());
        }
    }
}

TEST_CASE("a rank whose heartbeat stopped is DEAD, and DEAD comes first", "[job_view]") {
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    r1.heartbeat = 1090 * kSec;  // 10 s older than rank 0's
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);
    const Analysis a = analyze_paths({dir.path.string() + "/r0.ncw", dir.path.string() + "/r1.ncw"}, {});
    REQUIRE(a.jobs.size() == 1);
    const CommResult& c = a.jobs[0].comms.at(0);
    CHECK_FALSE(c.view.ranks.at(1).alive);
    CHECK(c.view.ranks.at(1).heartbeat_age_s == Approx(10.0));
    const verdict::Verdict* v = find_kind(c, verdict::Kind::Dead);
    REQUIRE(v != nullptr);
    CHECK(v->culprits == std::vector<int>{1});
    CHECK(a.all_verdicts().front().verdict->kind == verdict::Kind::Dead);
}

TEST_CASE("files of another boot are put on the job's clock", "[job_view]") {
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    // Rank 1 on another host whose monotonic clock started elsewhere; same wall-clock moments.
    r1.host = "node-b";
    r1.boot = 0xB008;
    const uint64_t shift = 5000 * kSec;
    r1.start_mono += shift;
    r1.heartbeat += shift;
    r1.last_issue += shift;
    r1.last_progress += shift;
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);
    const Analysis a = analyze_paths({dir.file("r0.ncw"), dir.file("r1.ncw")}, {});
    const CommResult& c = a.jobs.at(0).comms.at(0);
    CHECK(c.view.ranks.at(1).alive);
    CHECK(c.view.ranks.at(1).heartbeat_age_s == Approx(0.0));
    CHECK(c.view.ranks.at(1).t_last_progress_ns == 1095 * kSec);
    REQUIRE(find_kind(c, verdict::Kind::NotJoined) != nullptr);
    CHECK(find_kind(c, verdict::Kind::Dead) == nullptr);
}

TEST_CASE("different job ids are different jobs; missing ranks are listed", "[job_view]") {
    TempDir dir;
    RankSpec a0;
    a0.job = "alpha";
    a0.nranks = 4;
    a0.issued = a0.completed = 3;
    RankSpec a1 = a0;
    a1.rank = 2;
    a1.pid = 102;
    RankSpec b0 = a0;
    b0.job = "beta";
    b0.nranks = 1;
    write_rank(dir.file("a0.ncw"), a0);
    write_rank(dir.file("a1.ncw"), a1);
    write_rank(dir.file("b0.ncw"), b0);
    const Analysis a = analyze_paths(list_rank_files(dir.path.string()), {});
    REQUIRE(a.jobs.size() == 2);
    CHECK(a.jobs[0].job_id == "alpha");
    CHECK(a.jobs[1].job_id == "beta");
    const CommResult& c = a.jobs[0].comms.at(0);
    CHECK(c.view.ranks.size() == 2);
    CHECK(c.missing == std::vector<int>{1, 3});
    CHECK(has_warning(a, "ranks 1,3 of 4 not visible"));
    CHECK(a.jobs[1].comms.at(0).missing.empty());
    CHECK_FALSE(a.found_problem());
}

TEST_CASE("a MISMATCH names the odd rank", "[job_view]") {
    TempDir dir;
    for (int r = 0; r < 3; ++r) {
        RankSpec s;
        s.rank = s.global_rank = r;
        s.pid = 100 + r;
        s.nranks = 3;
        s.issued = s.completed = 6;
        s.odd_count_at = r == 2 ? 4 : 0;
        write_rank(dir.file("r" + std::to_string(r) + ".ncw"), s);
    }
    const Analysis a = analyze_paths(list_rank_files(dir.path.string()), {});
    const CommResult& c = a.jobs.at(0).comms.at(0);
    const verdict::Verdict* v = find_kind(c, verdict::Kind::Mismatch);
    REQUIRE(v != nullptr);
    CHECK(v->seq == 4);
    CHECK(v->culprits == std::vector<int>{2});
    CHECK(c.verdicts.size() == 1);
}

TEST_CASE("unreadable files become warnings; duplicates are read once", "[job_view]") {
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);
    std::ofstream(dir.file("junk.ncw")) << "not a rank file at all";
    const Analysis a = analyze_paths(
        {dir.file("r0.ncw"), dir.file("r1.ncw"), dir.path.string() + "/./r1.ncw", dir.file("junk.ncw")}, {});
    CHECK(a.files.size() == 3);
    CHECK(a.files_read == 2);
    CHECK(has_warning(a, "junk.ncw: not an ncclwatch rank file"));
    CHECK(a.jobs.at(0).comms.at(0).view.ranks.size() == 2);

    // A copy under another name claims the same rank: one is kept, with a warning.
    fs::copy_file(dir.file("r1.ncw"), dir.file("r1-copy.ncw"));
    const Analysis b = analyze_paths(list_rank_files(dir.path.string()), {});
    CHECK(b.jobs.at(0).comms.at(0).view.ranks.size() == 2);
    CHECK(has_warning(b, "rank 1 appears in"));
}

TEST_CASE("snapshots feed analyze() directly; live mode sees this process alive", "[job_view]") {
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    r0.pid = getpid();
    r0.host = this_hostname();
    r0.boot = this_boot_id_hash();
    r0.heartbeat = 0;  // watchdog never ran: no age check
    write_rank(dir.file("r0.ncw"), r0);
    RankFile f;
    REQUIRE(f.open(dir.file("r0.ncw")));
    AnalysisOptions opt;
    opt.live = true;
    opt.timeout_s = 1e9;
    const Analysis a = analyze({snapshot(f)}, opt);
    const CommResult& c = a.jobs.at(0).comms.at(0);
    CHECK(c.view.ranks.at(0).alive);
    CHECK(c.missing == std::vector<int>{1});
    CHECK_FALSE(a.found_problem());
    CHECK(format_ranks({7, 1, 2, 3, 5, 9, 8, 11, 12}) == "1-3,5,7-9,11,12");
    CHECK(format_ranks({}) == "");
    CHECK(verdict_importance(verdict::Kind::Dead) < verdict_importance(verdict::Kind::NotJoined));
    CHECK(verdict_importance(verdict::Kind::NotJoined) < verdict_importance(verdict::Kind::Mismatch));
    CHECK(verdict_importance(verdict::Kind::Mismatch) < verdict_importance(verdict::Kind::GpuNotReached));
    CHECK(verdict_importance(verdict::Kind::GpuNotReached) < verdict_importance(verdict::Kind::StuckInNccl));
}

TEST_CASE("p2p counts come from the ring: an unmatched send to a peer at rest is NOT_JOINED, not UNKNOWN",
          "[job_view]") {
    TempDir dir;
    // Rank 0 sent #1..#3 to rank 1; #3 has been pending since t=90 s. Rank 1 received #1 and #2 and posted nothing
    // more: at rest, it has not joined (a pipeline stage before its receive). No collective is outstanding.
    RankSpec r0;
    r0.issued = r0.completed = 4;
    r0.last_issue = r0.last_progress = 1090 * kSec;
    for (uint64_t q = 1; q <= 3; ++q) r0.p2p.push_back({OpType::Send, 1, q, q < 3, 1080 * kSec + q * 5 * kSec});
    RankSpec r1 = r0;
    r1.rank = r1.global_rank = 1;
    r1.pid = 101;
    r1.p2p.clear();
    for (uint64_t q = 1; q <= 2; ++q) r1.p2p.push_back({OpType::Recv, 0, q, true, 1080 * kSec + q * 5 * kSec});
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);

    AnalysisOptions opt;
    opt.timeout_s = 5;
    const Analysis a = analyze_paths({dir.file("r0.ncw"), dir.file("r1.ncw")}, opt);
    REQUIRE(a.jobs.size() == 1);
    REQUIRE(a.jobs[0].comms.size() == 1);
    const CommResult& c = a.jobs[0].comms[0];
    REQUIRE(c.view.ranks.size() == 2);
    CHECK(c.view.ranks[0].p2p_known);
    REQUIRE(c.view.ranks[0].p2p.size() == 1);
    CHECK(c.view.ranks[0].p2p[0].peer == 1);
    CHECK(c.view.ranks[0].p2p[0].sends_issued == 3);
    CHECK(c.view.ranks[0].p2p[0].sends_completed == 2);
    CHECK(c.view.ranks[0].p2p[0].t_oldest_send_pending_ns == 1095 * kSec);
    const verdict::Verdict* v = find_kind(c, verdict::Kind::NotJoined);
    REQUIRE(v != nullptr);
    CHECK(v->culprits == std::vector<int>{1});
    CHECK(v->summary.find("rank 0 waits 5.0 s in send #3 to rank 1, but rank 1 posted only 2 receives") !=
          std::string::npos);
    CHECK(find_kind(c, verdict::Kind::Unknown) == nullptr);

    SECTION("with p2p off (the watchdog) the ring is not read") {
        AnalysisOptions off = opt;
        off.p2p = false;
        const Analysis b = analyze_paths({dir.file("r0.ncw"), dir.file("r1.ncw")}, off);
        CHECK_FALSE(b.jobs[0].comms[0].view.ranks[0].p2p_known);
    }
}

TEST_CASE("a rank ahead of the others is EXTRA_OP; roles across communicators", "[job_view]") {
    TempDir dir;
    // Comm 0xC0 (3 ranks): rank 2 (pid 102) issued #5 that ranks 0 and 1 never issued; it waits since t=90 s.
    RankSpec base;
    base.nranks = 3;
    base.issued = base.completed = 4;
    base.last_issue = base.last_progress = 1085 * kSec;
    std::vector<std::string> files;
    for (int r = 0; r < 3; ++r) {
        RankSpec s = base;
        s.rank = s.global_rank = r;
        s.pid = 100 + r;
        if (r == 2) s.issued = 5, s.last_issue = 1090 * kSec;
        files.push_back(dir.file("c0-r" + std::to_string(r) + ".ncw"));
        write_rank(files.back(), s);
    }
    // Comm 0xD0 (2 ranks): pid 103 waits in #8 since t=95 s for pid 102, which is held in 0xC0: a cascade.
    RankSpec d0 = base;
    d0.comm_id = 0xD0;
    d0.nranks = 2;
    d0.rank = 0;
    d0.global_rank = 3;
    d0.pid = 103;
    d0.issued = 8, d0.completed = 7, d0.last_issue = 1095 * kSec, d0.last_progress = 1094 * kSec;
    RankSpec d1 = d0;
    d1.rank = 1;
    d1.global_rank = 2;
    d1.pid = 102;
    d1.issued = d1.completed = 6;  // two behind, so not a 1 vs 1 tie
    files.push_back(dir.file("d0-r0.ncw"));
    write_rank(files.back(), d0);
    files.push_back(dir.file("d0-r1.ncw"));
    write_rank(files.back(), d1);

    AnalysisOptions opt;
    opt.timeout_s = 3;
    const Analysis a = analyze_paths(files, opt);
    REQUIRE(a.jobs.size() == 1);
    REQUIRE(a.jobs[0].comms.size() == 2);
    const CommResult* c0 = nullptr;
    const CommResult* dd = nullptr;
    for (const auto& c : a.jobs[0].comms) (c.comm_id == 0xC0 ? c0 : dd) = &c;
    REQUIRE(c0);
    REQUIRE(dd);
    const verdict::Verdict* x = find_kind(*c0, verdict::Kind::ExtraOp);
    REQUIRE(x != nullptr);
    CHECK(x->culprits == std::vector<int>{2});
    CHECK(x->role == verdict::Role::Initiating);
    const verdict::Verdict* n = find_kind(*dd, verdict::Kind::NotJoined);
    REQUIRE(n != nullptr);
    CHECK(n->culprits == std::vector<int>{1});
    CHECK(n->role == verdict::Role::Cascade);
    CHECK(n->caused_by_comm == 0xC0);
    CHECK(a.all_verdicts().front().verdict->kind == verdict::Kind::ExtraOp);
}

TEST_CASE("a job that hung and was then torn down node by node is judged as it stood", "[job_view]") {
    // Ranks 0-2 wait in #5 since t=1096 s (their shims reported the stall at 1106 s); rank 3 never issued it. The
    // launcher then ends node 0 (ranks 0, 1) by SIGTERM at t=1110 s and node 1 (ranks 2, 3) 0.8 s later: not one
    // moment, but every first departure is a signal from outside, after the hang began. Not DEAD ranks 0,1.
    TempDir dir;
    std::vector<std::string> paths;
    for (int r = 0; r < 4; ++r) {
        RankSpec s;
        s.rank = s.global_rank = r;
        s.pid = 100 + r;
        s.nranks = 4;
        s.issued = r == 3 ? 4 : 5;
        s.completed = 4;
        s.last_issue = (r == 3 ? 1094 : 1096) * kSec;
        s.last_progress = 1095 * kSec;
        s.stall_since = r == 3 ? 0 : 1096 * kSec;
        s.end_kind = disk::EndKind::Terminated;
        s.end_status = 15;
        s.end_mono = r < 2 ? 1110 * kSec : 1110 * kSec + 800'000'000;
        s.heartbeat = s.end_mono;
        s.async_error = r == 2 ? 6 : 0;  // ncclRemoteError: node 0's ranks went first
        paths.push_back(dir.file("r" + std::to_string(r) + ".ncw"));
        write_rank(paths.back(), s);
    }
    const Analysis a = analyze_paths(paths, {});
    REQUIRE(a.jobs.size() == 1);
    const CommResult& c = a.jobs[0].comms.at(0);
    CHECK(find_kind(c, verdict::Kind::Dead) == nullptr);
    CHECK(find_kind(c, verdict::Kind::AsyncError) == nullptr);
    const verdict::Verdict* v = find_kind(c, verdict::Kind::NotJoined);
    REQUIRE(v != nullptr);
    CHECK(v->culprits == std::vector<int>{3});
    CHECK(a.all_verdicts().front().verdict->kind == verdict::Kind::NotJoined);
    CHECK(has_warning(a, "judged as it stood at the first of them"));
}

TEST_CASE("a rank that exits first is still the culprit when the launcher ends the others", "[job_view]") {
    // Rank 1 exits with code 3 at t=1100 s; the launcher ends rank 0 by SIGTERM 0.3 s later. No hang before.
    TempDir dir;
    auto [r0, r1] = two_ranks_one_missing_op();
    r0.last_issue = 1099 * kSec;
    r0.last_progress = 1098 * kSec;
    r1.last_issue = r1.last_progress = 1098 * kSec;
    r1.end_kind = disk::EndKind::Exit;
    r1.end_status = 3;
    r1.end_mono = r1.heartbeat = 1100 * kSec;
    r0.end_kind = disk::EndKind::Terminated;
    r0.end_status = 15;
    r0.end_mono = r0.heartbeat = 1100 * kSec + 300'000'000;
    write_rank(dir.file("r0.ncw"), r0);
    write_rank(dir.file("r1.ncw"), r1);
    const Analysis a = analyze_paths({dir.path.string() + "/r0.ncw", dir.path.string() + "/r1.ncw"}, {});
    REQUIRE(a.jobs.size() == 1);
    const verdict::Verdict* v = find_kind(a.jobs[0].comms.at(0), verdict::Kind::Dead);
    REQUIRE(v != nullptr);
    CHECK(v->culprits == std::vector<int>{1});
    CHECK_FALSE(has_warning(a, "judged as it stood"));
}

namespace {

// A live rank of job "j" in communicator 0x42 of 4 ranks, and `claimed` more communicators of 65,536 ranks each.
FileSnapshot live_rank(int rank, int claimed) {
    FileSnapshot s;
    s.ok = true;
    s.path = "host:rank" + std::to_string(rank);
    s.header.job_id = "j";
    s.header.global_rank = rank;
    s.header.host = "host";
    s.header.pid = 100 + rank;
    CommInfo c;
    c.state = uint32_t(disk::CommState::Active);
    c.comm_id = 0x42;
    c.rank = rank;
    c.nranks = 4;
    s.comms.push_back(c);
    for (int k = 0; k < claimed; ++k) {
        c.comm_id = 0x1000 + uint64_t(k);
        c.nranks = 65536;
        s.comms.push_back(c);
    }
    return s;
}

}  // namespace

// Issue 45: one rank claiming communicators of 65,536 ranks sized every list of the analysis by ranks nobody reported
// (a frame of 1 MiB, 6.8 GB). The live collector bounds them by what the job reported.
TEST_CASE("live: absent ranks are analysed only as far as the job's reports justify them", "[job_view]") {
    const std::vector<FileSnapshot> files = {live_rank(0, 50), live_rank(1, 0), live_rank(2, 0)};
    AnalysisOptions opt;
    opt.live = true;
    opt.timeout_s = 1e9;
    opt.absent_floor = 64;
    const Analysis a = analyze(files, opt);
    REQUIRE(a.jobs.size() == 1);
    const JobResult& j = a.jobs[0];
    // Rank 3 of 0x42 never reported: one absent rank, within the job's reports; the 50 claims are not.
    REQUIRE(j.comms.size() == 1);
    CHECK(j.comms[0].comm_id == 0x42);
    CHECK(j.comms[0].missing == std::vector<int>{3});
    CHECK(j.set_aside == 50);
    CHECK(j.set_aside_nranks == 65536);
    CHECK(j.set_aside_seen == 1);
    const bool said = std::any_of(a.warnings.begin(), a.warnings.end(), [](const std::string& w) {
        return w.find("job j: 50 communicator(s) set aside, not analysed") != std::string::npos;
    });
    CHECK(said);

    // Offline, a node's files of a larger job miss most ranks: every communicator is analysed.
    opt.absent_floor = 0;
    const Analysis off = analyze(files, opt);
    CHECK(off.jobs.at(0).comms.size() == 51);
    CHECK(off.jobs[0].set_aside == 0);
}

TEST_CASE("an analysis stops at its next step once its cancel flag is set, and says so", "[job_view]") {
    const std::vector<FileSnapshot> files = {live_rank(0, 0), live_rank(1, 0)};
    std::atomic<bool> stop{true};
    AnalysisOptions opt;
    opt.live = true;
    opt.cancel = &stop;
    const Analysis a = analyze(files, opt);
    CHECK(a.cancelled);
    CHECK(a.jobs.empty());
    REQUIRE_FALSE(a.warnings.empty());
    CHECK(a.warnings.back().find("analysis interrupted") != std::string::npos);
    stop = false;
    const Analysis b = analyze(files, opt);
    CHECK_FALSE(b.cancelled);
    CHECK(b.jobs.size() == 1);
}

// The rank-file reader over time: liveness, dump requests, listing, a racing writer, the environment region.
#include "rank_file_fixtures.h"

using namespace rank_file_fixtures;
using namespace ncw;
using disk::OpType;
namespace fs = std::filesystem;

TEST_CASE("liveness: exit state, heartbeat age, kill(pid, 0)", "[rank_file]") {
    FileBuilder b;
    b.standard();
    HeaderInfo h;
    h.pid = getpid();
    h.host = this_hostname();
    h.boot_id_hash = this_boot_id_hash();
    h.heartbeat_mono_ns = 50'000000000ull;
    h.process_state = uint32_t(disk::ProcessState::Running);
    CommInfo c;
    c.rank = 0;
    c.nranks = 2;

    auto ctx = live_context(h.heartbeat_mono_ns + 1'000000000ull);
    CHECK(ctx.host == this_hostname());
    auto s = to_rank_comm_state(h, c, "x", ctx);
    CHECK(s.alive);
    CHECK_FALSE(s.exited_clean);
    CHECK(s.heartbeat_age_s == Approx(1.0));

    // Stale heartbeat on this boot: gone.
    ctx.now_mono_ns = h.heartbeat_mono_ns + 6'000000000ull;
    s = to_rank_comm_state(h, c, "x", ctx);
    CHECK_FALSE(s.alive);
    CHECK(s.heartbeat_age_s == Approx(6.0));

    // Another boot: monotonic clocks do not compare, so no age check (live).
    HeaderInfo other = h;
    other.boot_id_hash = h.boot_id_hash ^ 1;
    s = to_rank_comm_state(other, c, "x", ctx);
    CHECK(s.alive);
    CHECK(s.heartbeat_age_s == 0);

    // Exited cleanly.
    HeaderInfo exited = h;
    exited.process_state = uint32_t(disk::ProcessState::ExitedClean);
    ctx.now_mono_ns = h.heartbeat_mono_ns;
    s = to_rank_comm_state(exited, c, "x", ctx);
    CHECK_FALSE(s.alive);
    CHECK(s.exited_clean);

    // A process of this host and boot that no longer exists.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    REQUIRE(child > 0);
    REQUIRE(waitpid(child, nullptr, 0) == child);
    HeaderInfo gone = h;
    gone.pid = child;
    s = to_rank_comm_state(gone, c, "x", ctx);
    CHECK_FALSE(s.alive);
    // Same pid on another host: not probed.
    gone.host = "elsewhere";
    s = to_rank_comm_state(gone, c, "x", ctx);
    CHECK(s.alive);
    // pid 0 / negative never reach kill().
    HeaderInfo zero = h;
    zero.pid = 0;
    CHECK(to_rank_comm_state(zero, c, "x", ctx).alive);
    zero.pid = -1;
    CHECK(to_rank_comm_state(zero, c, "x", ctx).alive);
}

TEST_CASE("liveness, live: the process the socket proved is probed, never the pid the rank says", "[rank_file]") {
    HeaderInfo h;
    h.host = this_hostname();
    h.boot_id_hash = this_boot_id_hash();
    h.heartbeat_mono_ns = 50'000000000ull;
    h.process_state = uint32_t(disk::ProcessState::Running);
    CommInfo c;
    c.rank = 0;
    c.nranks = 2;
    const auto ctx = live_context(h.heartbeat_mono_ns + 1'000000000ull);
    const pid_t child = fork();
    if (child == 0) _exit(0);
    REQUIRE(child > 0);
    REQUIRE(waitpid(child, nullptr, 0) == child);

    // A label of a process gone (a pid the rank gave itself in a namespace of its own), the proven process alive.
    HeaderInfo label_gone = h;
    label_gone.pid = child;
    label_gone.proven_pid = getpid();
    CHECK(to_rank_comm_state(label_gone, c, "x", ctx).alive);
    // A label of a live process (another rank's pid, say), the proven process gone: gone.
    HeaderInfo proven_gone = h;
    proven_gone.pid = getpid();
    proven_gone.proven_pid = child;
    CHECK_FALSE(to_rank_comm_state(proven_gone, c, "x", ctx).alive);
    // In a pid namespace the collector cannot see into (-1): not probed, whatever the label.
    HeaderInfo unseen = h;
    unseen.pid = child;
    unseen.proven_pid = -1;
    CHECK(to_rank_comm_state(unseen, c, "x", ctx).alive);
}

TEST_CASE("request_dump increments dump_request", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.standard();
    b.write(dir.file("d.ncw"));
    std::string err;
    REQUIRE(request_dump(dir.file("d.ncw"), &err));
    REQUIRE(request_dump(dir.file("d.ncw"), &err));
    RankFile f;
    REQUIRE(f.open(dir.file("d.ncw")));
    CHECK(f.header().dump_request == 2);
    CHECK_FALSE(request_dump(dir.file("none.ncw"), &err));
    CHECK_FALSE(err.empty());
}

TEST_CASE("list_rank_files finds *.ncw files, optionally recursively", "[rank_file]") {
    TempDir dir;
    FileBuilder b;
    b.write(dir.file("b.ncw"));
    b.write(dir.file("a.ncw"));
    b.write(dir.file("notes.txt"));
    fs::create_directories(dir.path / "sub" / "deeper");
    b.write((dir.path / "sub" / "c.ncw").string());
    b.write((dir.path / "sub" / "deeper" / "d.ncw").string());

    const auto flat = list_rank_files(dir.path.string());
    REQUIRE(flat.size() == 2);
    CHECK(fs::path(flat[0]).filename() == "a.ncw");
    CHECK(fs::path(flat[1]).filename() == "b.ncw");
    CHECK(list_rank_files(dir.path.string(), true).size() == 4);

    std::vector<std::string> errors;
    CHECK(list_rank_files(dir.file("missing"), false, &errors).empty());
    CHECK(errors.size() == 1);
}

TEST_CASE("a writer racing the reader never yields an inconsistent record", "[rank_file][concurrency]") {
    TempDir dir;
    FileBuilder b(256, 1);
    b.add_comm(0xC0FFEE, 0, 1);
    const auto path = dir.file("race.ncw");
    b.write(path);

    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    void* map = mmap(nullptr, b.file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(map != MAP_FAILED);
    auto* base = static_cast<unsigned char*>(map);
    auto* hdr = reinterpret_cast<disk::FileHeader*>(base);
    auto* slot = reinterpret_cast<disk::CommSlot*>(base + b.comm_off);
    auto rec = [&](uint64_t t) {
        return reinterpret_cast<disk::OpRecord*>(base + b.ring_off + (t % 256) * b.rec_size);
    };
    // Release stores keep the odd stamp (or the zeroed seq) visible before any new data.
    auto st = [](auto& field, auto v) { __atomic_store_n(&field, v, __ATOMIC_RELEASE); };

    // The shim's protocols: a record takes its ticket first, is stamped odd, filled, then stamped even; a signature
    // is zeroed, filled, then given its seq.
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        uint64_t seq = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            const uint64_t t = hdr->write_ticket.fetch_add(1, std::memory_order_acq_rel);
            disk::OpRecord* r = rec(t);
            r->stamp.store(2 * t + 1, std::memory_order_relaxed);
            st(r->comm_id, t * 3 + 1);
            st(r->seq, t);
            st(r->op_index, t ^ 0x5555);
            st(r->count, t * 7);
            st(r->sendbuf, ~t);
            st(r->recvbuf, t << 1);
            st(r->stream, t + 11);
            st(r->t_issue_ns, t * 13);
            st(r->tid, uint32_t(t));
            st(r->group_id, uint32_t(t >> 3));
            st(r->op, uint8_t(OpType::AllReduce));
            st(r->dtype, uint8_t(t % 12));
            st(r->peer_or_root, int32_t(t & 0xffff));
            st(r->redop, int32_t(t % 5));
            r->stamp.store(2 * t + 2, std::memory_order_release);

            ++seq;
            auto& e = slot->recent[seq % disk::kRecentSigs];
            e.seq.store(0, std::memory_order_relaxed);
            st(e.count, seq * 5);
            st(e.t_issue_ns, seq * 9);
            st(e.tid, uint32_t(seq));
            st(e.stream, seq + 3);
            e.seq.store(seq, std::memory_order_release);
            slot->coll_issued.store(seq, std::memory_order_release);
        }
    });

    RankFile f;
    REQUIRE(f.open(path));
    uint64_t seen = 0, torn = 0, sigs = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    int snaps = 0;
    while (std::chrono::steady_clock::now() < until || snaps < 50) {
        ++snaps;
        const RecordSet rs = f.records();
        torn += rs.torn;
        uint64_t prev = 0;
        bool first = true;
        for (const auto& r : rs.records) {
            const uint64_t t = r.ticket;
            const bool ok = r.comm_id == t * 3 + 1 && r.seq == t && r.op_index == (t ^ 0x5555) && r.count == t * 7 &&
                            r.sendbuf == ~t && r.recvbuf == (t << 1) && r.stream == t + 11 && r.t_issue_ns == t * 13 &&
                            r.tid == uint32_t(t) && r.group_id == uint32_t(t >> 3) && r.dtype == t % 12 &&
                            r.peer_or_root == int32_t(t & 0xffff) && r.redop == int32_t(t % 5);
            if (!ok) FAIL("inconsistent record at ticket " << t);
            if (!first && t <= prev) FAIL("records out of order");
            prev = t;
            first = false;
            ++seen;
        }
        for (const auto& c : f.comms())
            for (const auto& s : c.recent) {
                if (s.count != s.seq * 5 || s.t_issue_ns != s.seq * 9 || s.tid != uint32_t(s.seq) ||
                    s.stream != s.seq + 3)
                    FAIL("inconsistent signature at seq " << s.seq);
                ++sigs;
            }
    }
    stop = true;
    writer.join();
    munmap(map, b.file_size);
    INFO("snapshots " << snaps << ", records " << seen << ", torn " << torn << ", signatures " << sigs);
    CHECK(seen > 0);
    CHECK(sigs > 0);
}

TEST_CASE("format 1.1: the environment region reads back; a 1.0 file has none", "[rank_file][env]") {
    TempDir dir;
    FileBuilder b;
    b.standard(4);
    const std::vector<std::string> entries = {"NCCL_DEBUG=INFO", "RANK=3", "ncclwatch.no_effect=NCCL_SOCKET_TIMEOUT",
                                              "EMPTY="};
    b.add_env_region(entries);
    const auto path = dir.file("r.ncw");
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.warnings().empty());
    CHECK(f.header().env == entries);
    CHECK(f.header().minor == 1);
    CHECK(f.records().records.size() == 4);  // the region does not disturb the rest

    // The same bytes labelled 1.0: a 1.0 writer never wrote these fields, so the reader does not look at them.
    b.hdr().minor = 0;
    b.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env.empty());
    CHECK(f.warnings().empty());

    // A 1.1 header with the fields left zero (no region) is no region, not damage.
    FileBuilder plain;
    plain.hdr().minor = 1;
    plain.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env.empty());
    CHECK(f.warnings().empty());
}

TEST_CASE("a damaged environment region is ignored with a warning, the rest reads", "[rank_file][env]") {
    TempDir dir;
    const auto path = dir.file("r.ncw");
    auto try_with = [&](auto&& damage) {
        FileBuilder b;
        b.standard(4);
        b.add_env_region({"A=1"});
        damage(b);
        b.write(path);
        RankFile f;
        REQUIRE(f.open(path));
        CHECK(has_warning(f, "environment region ignored"));
        CHECK(f.header().env.empty());
        CHECK(f.records().records.size() == 4);
    };
    try_with([](FileBuilder& b) { b.hdr().env_offset = b.ring_off; });         // overlaps the ring
    try_with([](FileBuilder& b) { b.hdr().env_capacity = 0xFFFFFFFFu; });      // absurd size
    try_with([](FileBuilder& b) { b.hdr().env_offset = b.file_size; });        // past the declared end
    try_with([](FileBuilder& b) { b.hdr().env_offset = uint64_t(1) << 62; });  // overflow bait
}

TEST_CASE("only published environment bytes are read; a cut entry is dropped", "[rank_file][env]") {
    TempDir dir;
    const auto path = dir.file("r.ncw");
    FileBuilder b;
    b.add_env_region({"A=1", "B=22", "C=333"}, 4 + 5 + 2);  // "A=1\0B=22\0C=": C is half-published
    b.write(path);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22"});

    // A count beyond the capacity is clamped to it; a truncated file reads what it holds and says so.
    b.hdr().env_bytes = uint64_t(1) << 40;
    b.write(path);
    REQUIRE(f.open(path));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22", "C=333"});
    b.write(path, b.file_size - 100);
    REQUIRE(f.open(path));
    CHECK(has_warning(f, "environment region cut"));
    CHECK(f.header().env == std::vector<std::string>{"A=1", "B=22", "C=333"});
}

TEST_CASE("the writer's environment region round-trips through the reader", "[rank_file][env]") {
    TempDir dir;
    ProcessIdentity id;
    id.global_rank = 5;
    id.host = "node-z";
    id.pid = getpid();
    id.job_id = "envjob";
    RankFileWriter w = create_rank_file(dir.path.string(), id, disk::kMinRingCapacity, 0);
    REQUIRE(w.file_backed);
    REQUIRE(w.env_capacity == disk::kEnvCapacity);
    CHECK(w.hdr->minor == disk::kFormatMinor);

    // Whole entries only, keeping room for later appends; an entry with a NUL or an empty one is refused.
    const std::string big(disk::kEnvCapacity - 100, 'x');
    CHECK(append_env_entries(w, {"RANK=5", "NCCL_DEBUG=WARN", big, std::string("BAD=a\0b", 7), ""}, 1000) == 3);
    CHECK(append_env_entries(w, {"ncclwatch.probe=done"}) == 0);

    RankFile f;
    REQUIRE(f.open(w.path));
    CHECK(f.warnings().empty());
    CHECK(f.header().env == std::vector<std::string>{"RANK=5", "NCCL_DEBUG=WARN", "ncclwatch.probe=done"});
    CHECK(f.header().file_size == w.size);
    munmap(w.base, w.size);
}

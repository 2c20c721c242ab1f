// The live digest client's frames: digest building and change detection, and the send slot on a real socket (one
// frame at most, EPIPE without SIGPIPE).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "read/wire.h"
#include "shim/live/digest_frame.h"

using namespace ncw;
using namespace ncw::live_client;

TEST_CASE("make_digest keeps the newest signatures; digest_changed ignores only the send time") {
    HeaderInfo h;
    h.process_state = 1;
    CommInfo c;
    c.comm_id = 7;
    c.coll_issued = 40;
    for (uint64_t s = 1; s <= 40; ++s) c.recent.push_back(SigInfo{s});
    wire::Digest d = make_digest(h, {c}, 1000);
    CHECK(d.sent_mono_ns == 1000);
    CHECK(d.process_state == 1);
    REQUIRE(d.comms.size() == 1);
    REQUIRE(d.comms[0].recent.size() == wire::kMaxDigestSigs);
    CHECK(d.comms[0].recent.back().seq == 40);
    CHECK(d.comms[0].recent.front().seq == 40 - wire::kMaxDigestSigs + 1);

    std::vector<uint8_t> a, b, e;
    wire::encode(d, a);
    d.sent_mono_ns = 2000;
    wire::encode(d, b);
    CHECK_FALSE(digest_changed(a, b));
    CHECK(digest_changed({}, b));
    d.comms[0].coll_completed = 39;
    wire::encode(d, e);
    CHECK(digest_changed(b, e));
}

TEST_CASE("the Python stacks go once per capture and connection, in the digest that is sent") {
    HeaderInfo h;
    LastDigest last;
    CHECK_FALSE(make_digest(h, {}, 1, last).py_stacks);  // never captured
    h.py_stacks_seq = 4;
    h.py_stacks_status = 1;
    h.py_stacks_text = "Thread 0x1 (most recent call first):\n";
    wire::Digest d = make_digest(h, {}, 2, last);
    REQUIRE(d.py_stacks);
    CHECK(d.py_stacks->seq == 4);
    CHECK(make_digest(h, {}, 3, last).py_stacks);  // not sent (not taken): still due
    std::vector<uint8_t> f;
    wire::encode(d, f);
    last.take(std::move(f));
    CHECK_FALSE(make_digest(h, {}, 4, last).py_stacks);  // the collector has them
    h.py_stacks_seq = 5;                                 // being rewritten: not yet
    CHECK_FALSE(make_digest(h, {}, 5, last).py_stacks);
    h.py_stacks_seq = 6;  // a new capture
    CHECK(make_digest(h, {}, 6, last).py_stacks);
    last.clear();  // a new connection: the collector has none
    h.py_stacks_seq = 4;
    CHECK(make_digest(h, {}, 7, last).py_stacks);
}

TEST_CASE("the send slot holds one frame, drains a non-blocking socket, and reports EPIPE without a signal") {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int small = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    SendSlot slot;
    std::string err;
    REQUIRE(slot.offer(std::vector<uint8_t>(1 << 20, 0xab)));  // far more than the socket buffers
    REQUIRE(slot.flush(sv[0], &err));
    CHECK(slot.busy());
    CHECK_FALSE(slot.offer(std::vector<uint8_t>(10, 1)));  // refused: the older frame is still leaving

    // The reader drains; the frame completes; the slot takes the next one.
    std::vector<uint8_t> got;
    uint8_t buf[65536];
    for (int i = 0; i < 100000 && got.size() < (1u << 20); ++i) {
        const ssize_t n = read(sv[1], buf, sizeof buf);
        if (n > 0) got.insert(got.end(), buf, buf + n);
        REQUIRE(slot.flush(sv[0], &err));
    }
    REQUIRE(got.size() == (1u << 20));
    CHECK_FALSE(slot.busy());
    CHECK(slot.offer(std::vector<uint8_t>(10, 1)));

    // The peer is gone: EPIPE comes back as an error; SIGPIPE (default action: kill) never fires.
    close(sv[1]);
    const auto old = signal(SIGPIPE, SIG_DFL);
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
        ok = slot.flush(sv[0], &err);
        if (ok && !slot.busy()) ok = slot.offer(std::vector<uint8_t>(10, 1)) && slot.flush(sv[0], &err);
    }
    CHECK_FALSE(ok);
    CHECK_FALSE(err.empty());
    signal(SIGPIPE, old);
    close(sv[0]);
}

TEST_CASE("a digest carries the signatures not sent yet on its connection, up to 64 a communicator (protocol 1.12)") {
    HeaderInfo h;
    LastDigest last;
    const auto comm_upto = [](uint64_t newest) {
        CommInfo c;
        c.comm_id = 7;
        c.coll_issued = newest;
        // What the comm slot holds: its newest kRecentSigs.
        for (uint64_t s = newest > disk::kRecentSigs ? newest - disk::kRecentSigs + 1 : 1; s <= newest; ++s)
            c.recent.push_back(SigInfo{s});
        return c;
    };
    const auto seqs = [](const wire::Digest& d) {
        return std::pair(d.comms[0].recent.front().seq, d.comms[0].recent.back().seq);
    };
    // A new connection: all the slot holds (64).
    wire::Digest d = make_digest(h, {comm_upto(100)}, 1, last);
    CHECK(seqs(d) == std::pair<uint64_t, uint64_t>(37, 100));
    // Not sent: the next digest carries them again.
    d = make_digest(h, {comm_upto(110)}, 2, last);
    CHECK(seqs(d) == std::pair<uint64_t, uint64_t>(47, 110));
    std::vector<uint8_t> f;
    wire::encode(d, f);
    last.take(std::move(f));
    // Sent up to #110: 30 new ones since, all carried (16 newest and 14 before them).
    d = make_digest(h, {comm_upto(140)}, 3, last);
    CHECK(seqs(d) == std::pair<uint64_t, uint64_t>(111, 140));
    wire::encode(d, f);
    last.take(std::move(f));
    // Nothing new: the newest 16 as always.
    d = make_digest(h, {comm_upto(140)}, 4, last);
    CHECK(seqs(d) == std::pair<uint64_t, uint64_t>(140 - wire::kMaxDigestSigs + 1, 140));
    // Without a connection's record: the newest 16 alone.
    CHECK(seqs(make_digest(h, {comm_upto(140)}, 5)) == std::pair<uint64_t, uint64_t>(125, 140));
    // A new connection forgets what the last one sent.
    last.clear();
    CHECK(seqs(make_digest(h, {comm_upto(140)}, 6, last)) == std::pair<uint64_t, uint64_t>(77, 140));
}

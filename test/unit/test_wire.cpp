// The live protocol codec: round trips, every truncation rejected, hostile lengths and counts, version rules, and
// stream reassembly.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "read/wire.h"

namespace {

using namespace ncw;
using namespace ncw::wire;

HeaderInfo sample_header() {
    HeaderInfo h;
    h.major = 1;
    h.minor = 1;
    h.header_size = 4096;
    h.comm_slot_size = 2048;
    h.max_comms = 64;
    h.record_size = 128;
    h.ring_capacity = 1 << 16;
    h.bt_depth = 8;
    h.comm_table_offset = 4096;
    h.ring_offset = 1 << 20;
    h.bt_offset = 1 << 24;
    h.file_size = 1ull << 30;
    h.actual_size = (1ull << 30) - 7;
    h.pid = 81234;
    h.global_rank = 317;
    h.local_rank = 5;
    h.world_size = 512;
    h.local_world_size = 8;
    h.host = "node39";
    h.job_id = "job-42";
    h.start_mono_ns = 123456789;
    h.start_real_ns = 1700000000000000000ull;
    h.boot_id_hash = 0xdeadbeefcafef00dull;
    h.nccl_version = 22809;
    h.cuda_driver_version = 12080;
    h.env = {"MASTER_ADDR=node0", "NCCL_DEBUG=INFO", "ncclwatch.lib=/usr/lib/libnccl.so.2"};
    h.heartbeat_mono_ns = 987654321;
    h.process_state = 1;
    h.num_comms = 2;
    h.write_ticket = 99999;
    h.dump_request = 3;
    h.dumps_written = 2;
    h.reports_written = 1;
    return h;
}

CommInfo sample_comm(uint32_t slot, size_t sigs) {
    CommInfo c;
    c.slot = slot;
    c.state = 2;
    c.stall_flags = 4;
    c.rank = 17;
    c.nranks = 512;
    c.cuda_dev = 5;
    c.blocking = 1;
    c.comm_id = 0x1234567890abcdefull + slot;
    c.parent_id = 0x42;
    c.split_color = -1;
    c.split_key = 9;
    c.comm_ptr = 0x7f0000001000ull;
    c.pci_bus_id = "0000:3b:00.0";
    c.name = "world";
    c.t_init_start_ns = 10;
    c.t_init_done_ns = 20;
    c.coll_issued = 9812;
    c.coll_returned = 9812;
    c.coll_reached = 9811;
    c.coll_completed = 9810;
    c.ops_issued = 9900;
    c.ops_completed = 9890;
    c.t_last_issue_ns = 30;
    c.t_last_progress_ns = 40;
    c.p2p_sends = 7;
    c.p2p_recvs = 8;
    c.async_error = -3;
    c.gpu_tracking = 1;
    c.stall_since_ns = 50;
    c.untracked_ops = 2;
    for (size_t i = 0; i < sigs; ++i) {
        SigInfo s;
        s.seq = 1000 + i;
        s.count = 1ull << 33;
        s.t_issue_ns = 60 + i;
        s.op = 3;
        s.dtype = 7;
        s.flags = 0x81;
        s.redop = 2;
        s.root = -1;
        s.tid = 4242;
        s.stream = 0xabc;
        c.recent.push_back(s);
    }
    return c;
}

bool same(const SigInfo& a, const SigInfo& b) {
    return a.seq == b.seq && a.count == b.count && a.t_issue_ns == b.t_issue_ns && a.op == b.op && a.dtype == b.dtype &&
           a.flags == b.flags && a.redop == b.redop && a.root == b.root && a.tid == b.tid && a.stream == b.stream;
}

void check_same(const CommInfo& a, const CommInfo& b) {
    CHECK(a.slot == b.slot);
    CHECK(a.state == b.state);
    CHECK(a.stall_flags == b.stall_flags);
    CHECK(a.rank == b.rank);
    CHECK(a.nranks == b.nranks);
    CHECK(a.cuda_dev == b.cuda_dev);
    CHECK(a.blocking == b.blocking);
    CHECK(a.comm_id == b.comm_id);
    CHECK(a.parent_id == b.parent_id);
    CHECK(a.split_color == b.split_color);
    CHECK(a.split_key == b.split_key);
    CHECK(a.comm_ptr == b.comm_ptr);
    CHECK(a.pci_bus_id == b.pci_bus_id);
    CHECK(a.name == b.name);
    CHECK(a.t_init_start_ns == b.t_init_start_ns);
    CHECK(a.t_init_done_ns == b.t_init_done_ns);
    CHECK(a.coll_issued == b.coll_issued);
    CHECK(a.coll_returned == b.coll_returned);
    CHECK(a.coll_reached == b.coll_reached);
    CHECK(a.coll_completed == b.coll_completed);
    CHECK(a.ops_issued == b.ops_issued);
    CHECK(a.ops_completed == b.ops_completed);
    CHECK(a.t_last_issue_ns == b.t_last_issue_ns);
    CHECK(a.t_last_progress_ns == b.t_last_progress_ns);
    CHECK(a.p2p_sends == b.p2p_sends);
    CHECK(a.p2p_recvs == b.p2p_recvs);
    CHECK(a.async_error == b.async_error);
    CHECK(a.gpu_tracking == b.gpu_tracking);
    CHECK(a.stall_since_ns == b.stall_since_ns);
    CHECK(a.untracked_ops == b.untracked_ops);
    REQUIRE(a.recent.size() == b.recent.size());
    for (size_t i = 0; i < a.recent.size(); ++i) CHECK(same(a.recent[i], b.recent[i]));
}

Hello sample_hello() {
    Hello m;
    m.token = "s3cret";
    m.header = sample_header();
    m.file = "/tmp/ncclwatch/job-42/node39.81234.ncw";
    return m;
}

Digest sample_digest() {
    Digest m;
    m.sent_mono_ns = 555;
    m.process_state = 1;
    m.comms = {sample_comm(0, 3), sample_comm(1, 0)};
    return m;
}

// Splits one encoded frame into header + payload, checking the header.
FrameHeader split(const std::vector<uint8_t>& frame, std::vector<uint8_t>& payload) {
    FrameHeader h;
    std::string err;
    REQUIRE(decode_header(frame.data(), frame.size(), h, &err));
    REQUIRE(frame.size() == kHeaderBytes + h.length);
    payload.assign(frame.begin() + kHeaderBytes, frame.end());
    return h;
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Every strict prefix of `payload` fails to decode, with a message.
template <class Msg>
void every_truncation_fails(const std::vector<uint8_t>& payload) {
    for (size_t n = 0; n < payload.size(); ++n) {
        // A copy of exactly n bytes, so a read past the end shows up under ASan.
        std::vector<uint8_t> cut(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(n));
        Msg m;
        std::string err;
        INFO("prefix of " << n << " bytes");
        CHECK_FALSE(decode(cut.data(), cut.size(), m, &err));
        CHECK_FALSE(err.empty());
    }
}

}  // namespace

TEST_CASE("Hello round trips with every field") {
    const Hello in = sample_hello();
    std::vector<uint8_t> frame;
    encode(in, frame);
    std::vector<uint8_t> payload;
    const FrameHeader h = split(frame, payload);
    CHECK(h.magic == kMagic);
    CHECK(h.major == kMajor);
    CHECK(h.minor == kMinor);
    CHECK(h.type == static_cast<uint16_t>(FrameType::Hello));
    CHECK(h.flags == 0);
    // The magic spells "NCWL" on the wire.
    CHECK(std::memcmp(frame.data(), "NCWL", 4) == 0);

    Hello out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.token == in.token);
    CHECK(out.file == in.file);
    const HeaderInfo &a = out.header, &b = in.header;
    CHECK(a.major == b.major);
    CHECK(a.minor == b.minor);
    CHECK(a.header_size == b.header_size);
    CHECK(a.comm_slot_size == b.comm_slot_size);
    CHECK(a.max_comms == b.max_comms);
    CHECK(a.record_size == b.record_size);
    CHECK(a.ring_capacity == b.ring_capacity);
    CHECK(a.bt_depth == b.bt_depth);
    CHECK(a.comm_table_offset == b.comm_table_offset);
    CHECK(a.ring_offset == b.ring_offset);
    CHECK(a.bt_offset == b.bt_offset);
    CHECK(a.file_size == b.file_size);
    CHECK(a.actual_size == b.actual_size);
    CHECK(a.pid == b.pid);
    CHECK(a.global_rank == b.global_rank);
    CHECK(a.local_rank == b.local_rank);
    CHECK(a.world_size == b.world_size);
    CHECK(a.local_world_size == b.local_world_size);
    CHECK(a.host == b.host);
    CHECK(a.job_id == b.job_id);
    CHECK(a.start_mono_ns == b.start_mono_ns);
    CHECK(a.start_real_ns == b.start_real_ns);
    CHECK(a.boot_id_hash == b.boot_id_hash);
    CHECK(a.nccl_version == b.nccl_version);
    CHECK(a.cuda_driver_version == b.cuda_driver_version);
    CHECK(a.env == b.env);
    CHECK(a.heartbeat_mono_ns == b.heartbeat_mono_ns);
    CHECK(a.process_state == b.process_state);
    CHECK(a.num_comms == b.num_comms);
    CHECK(a.write_ticket == b.write_ticket);
    CHECK(a.dump_request == b.dump_request);
    CHECK(a.dumps_written == b.dumps_written);
    CHECK(a.reports_written == b.reports_written);
}

TEST_CASE("Digest round trips, keeping the most recent signatures") {
    Digest in = sample_digest();
    in.comms.push_back(sample_comm(7, kMaxDigestSigs + 5));
    std::vector<uint8_t> frame;
    encode(in, frame);
    std::vector<uint8_t> payload;
    CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::Digest));
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.sent_mono_ns == in.sent_mono_ns);
    CHECK(out.process_state == in.process_state);
    REQUIRE(out.comms.size() == 3);
    check_same(out.comms[0], in.comms[0]);
    check_same(out.comms[1], in.comms[1]);
    // The third had more signatures than a digest carries: the newest kMaxDigestSigs survive.
    REQUIRE(out.comms[2].recent.size() == kMaxDigestSigs);
    CHECK(out.comms[2].recent.front().seq == in.comms[2].recent[5].seq);
    CHECK(out.comms[2].recent.back().seq == in.comms[2].recent.back().seq);
}

TEST_CASE("Small frames round trip") {
    std::vector<uint8_t> frame, payload;
    std::string err;
    SECTION("KeepAlive") {
        encode(KeepAlive{0xfedcba9876543210ull}, frame);
        CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::KeepAlive));
        KeepAlive m;
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        CHECK(m.sent_mono_ns == 0xfedcba9876543210ull);
    }
    SECTION("Bye and HelloAck carry no payload") {
        encode_bye(frame);
        CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::Bye));
        CHECK(payload.empty());
        frame.clear();
        encode_hello_ack(frame);
        CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::HelloAck));
        CHECK(payload.empty());
    }
    SECTION("Reject") {
        encode(Reject{"bad token"}, frame);
        CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::Reject));
        Reject m;
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        CHECK(m.reason == "bad token");
    }
    SECTION("DumpRequest") {
        encode(DumpRequest{77, "rank 3 never issued AllReduce #12"}, frame);
        CHECK(split(frame, payload).type == static_cast<uint16_t>(FrameType::DumpRequest));
        DumpRequest m;
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        CHECK(m.request_id == 77);
        CHECK(m.reason == "rank 3 never issued AllReduce #12");
    }
}

TEST_CASE("Every truncation of a valid payload is rejected cleanly") {
    std::vector<uint8_t> frame, payload;
    SECTION("Hello") {
        encode(sample_hello(), frame);
        split(frame, payload);
        every_truncation_fails<Hello>(payload);
    }
    SECTION("Digest") {
        encode(sample_digest(), frame);
        split(frame, payload);
        every_truncation_fails<Digest>(payload);
    }
    SECTION("KeepAlive") {
        encode(KeepAlive{1}, frame);
        split(frame, payload);
        every_truncation_fails<KeepAlive>(payload);
    }
    SECTION("Reject") {
        encode(Reject{"why"}, frame);
        split(frame, payload);
        every_truncation_fails<Reject>(payload);
    }
    SECTION("DumpRequest") {
        encode(DumpRequest{1, "why"}, frame);
        split(frame, payload);
        every_truncation_fails<DumpRequest>(payload);
    }
    SECTION("frame header") {
        encode(KeepAlive{1}, frame);
        for (size_t n = 0; n < kHeaderBytes; ++n) {
            std::vector<uint8_t> cut(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
            FrameHeader h;
            std::string err;
            CHECK_FALSE(decode_header(cut.data(), cut.size(), h, &err));
            CHECK_FALSE(err.empty());
        }
    }
}

TEST_CASE("A failed decode leaves the message untouched") {
    std::vector<uint8_t> frame, payload;
    encode(Reject{"first"}, frame);
    split(frame, payload);
    Reject m{"before"};
    std::string err;
    CHECK_FALSE(decode(payload.data(), payload.size() - 1, m, &err));
    CHECK(m.reason == "before");
}

TEST_CASE("Oversized lengths and counts are refused before anything is allocated") {
    std::string err;
    SECTION("frame length above kMaxPayload") {
        std::vector<uint8_t> frame;
        encode(KeepAlive{1}, frame);
        put_u32(frame, 12, kMaxPayload + 1);
        FrameHeader h;
        CHECK_FALSE(decode_header(frame.data(), frame.size(), h, &err));
        CHECK(err.find("exceeds the limit") != std::string::npos);
        put_u32(frame, 12, 0xffffffffu);
        CHECK_FALSE(decode_header(frame.data(), frame.size(), h, &err));
    }
    SECTION("string length above kMaxString") {
        std::vector<uint8_t> payload(4 + 8);
        put_u32(payload, 0, kMaxString + 1);
        Reject m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("reason") != std::string::npos);
        put_u32(payload, 0, 0xffffffffu);
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
    }
    SECTION("string length past the end") {
        std::vector<uint8_t> payload(4 + 8);
        put_u32(payload, 0, 9);
        Reject m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
    }
    SECTION("comm count above kMaxComms or past the end") {
        std::vector<uint8_t> payload(8 + 4 + 4, 0);
        put_u32(payload, 12, kMaxComms + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("comm count") != std::string::npos);
        put_u32(payload, 12, 0xffffffffu);
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        // Within the limit, but there are no bytes for the comms it announces.
        put_u32(payload, 12, 3);
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
    }
    SECTION("signature count above kMaxDigestSigs") {
        Digest d;
        d.comms = {sample_comm(0, 1)};
        std::vector<uint8_t> frame, payload;
        encode(d, frame);
        split(frame, payload);
        // The signature count sits right before the one signature block (4 + 8 * 5 + 4 + 1 * 3 + 4 * 4 + 8 bytes).
        const size_t sig_block = 4 + 8 + 8 + 8 + 3 + 4 + 4 + 4 + 8;
        const size_t at = payload.size() - sig_block - 4;
        REQUIRE(payload[at] == 1);
        put_u32(payload, at, kMaxDigestSigs + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("signature count") != std::string::npos);
    }
    SECTION("a nested block longer than its parent") {
        std::vector<uint8_t> frame, payload;
        encode(sample_digest(), frame);
        split(frame, payload);
        put_u32(payload, 16, 0x7fffffffu);  // the first comm block's length
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("comm") != std::string::npos);
    }
}

TEST_CASE("Wrong magic and other majors are rejected; a newer minor is accepted") {
    std::vector<uint8_t> frame;
    encode(KeepAlive{1}, frame);
    FrameHeader h;
    std::string err;
    SECTION("magic") {
        frame[0] ^= 0xff;
        CHECK_FALSE(decode_header(frame.data(), frame.size(), h, &err));
        CHECK(err.find("magic") != std::string::npos);
        // An HTTP client on the wrong port is not a frame either.
        const std::string get = "GET /metrics HTTP/1.1\r\n";
        CHECK_FALSE(decode_header(reinterpret_cast<const uint8_t*>(get.data()), get.size(), h, &err));
    }
    SECTION("newer major") {
        frame[4] = kMajor + 1;
        CHECK_FALSE(decode_header(frame.data(), frame.size(), h, &err));
        CHECK(err.find("not supported") != std::string::npos);
    }
    SECTION("major 0") {
        frame[4] = 0;
        CHECK_FALSE(decode_header(frame.data(), frame.size(), h, &err));
    }
    SECTION("newer minor") {
        frame[6] = kMinor + 3;
        REQUIRE(decode_header(frame.data(), frame.size(), h, &err));
        CHECK(h.minor == kMinor + 3);
    }
}

TEST_CASE("A newer minor's trailing bytes are ignored, in the payload and in nested blocks") {
    std::string err;
    SECTION("at the end of a payload") {
        std::vector<uint8_t> frame, payload;
        encode(DumpRequest{5, "r"}, frame);
        split(frame, payload);
        payload.insert(payload.end(), {1, 2, 3, 4, 5, 6, 7});
        DumpRequest m;
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        CHECK(m.request_id == 5);
        CHECK(m.reason == "r");
    }
    SECTION("inside each comm block of a Digest") {
        Digest in;
        in.comms = {sample_comm(0, 0), sample_comm(1, 0)};
        std::vector<uint8_t> frame, payload;
        encode(in, frame);
        split(frame, payload);
        // Rebuild the payload with four extra bytes at the end of each comm block, as a newer minor would.
        std::vector<uint8_t> grown(payload.begin(), payload.begin() + 16);
        size_t pos = 16;
        for (int i = 0; i < 2; ++i) {
            uint32_t len = 0;
            std::memcpy(&len, &payload[pos], 4);
            std::vector<uint8_t> block(payload.begin() + pos + 4, payload.begin() + pos + 4 + len);
            block.insert(block.end(), {0xaa, 0xbb, 0xcc, 0xdd});
            grown.resize(grown.size() + 4);
            put_u32(grown, grown.size() - 4, static_cast<uint32_t>(block.size()));
            grown.insert(grown.end(), block.begin(), block.end());
            pos += 4 + len;
        }
        REQUIRE(pos == payload.size());
        Digest out;
        REQUIRE(decode(grown.data(), grown.size(), out, &err));
        REQUIRE(out.comms.size() == 2);
        check_same(out.comms[0], in.comms[0]);
        check_same(out.comms[1], in.comms[1]);
    }
}

TEST_CASE("The encoder clamps to the decoder's limits") {
    Hello in = sample_hello();
    in.token = std::string(kMaxString + 100, 't');
    in.header.env.clear();
    for (uint32_t i = 0; i < kMaxEnv + 50; ++i)
        in.header.env.push_back("VAR" + std::to_string(i) + "=" + std::string(2000, 'x'));
    std::vector<uint8_t> frame, payload;
    encode(in, frame);
    const FrameHeader h = split(frame, payload);
    CHECK(h.length <= kMaxPayload);
    Hello out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.token.size() == kMaxString);
    CHECK(out.header.env.size() < in.header.env.size());
    CHECK(out.header.env.size() > 100);  // as many as fit
    CHECK(out.header.env.front() == in.header.env.front());
    CHECK(out.file == in.file);

    Digest d;
    for (uint32_t i = 0; i < kMaxComms + 3; ++i) d.comms.push_back(sample_comm(i, kMaxDigestSigs));
    frame.clear();
    encode(d, frame);
    split(frame, payload);
    Digest dout;
    REQUIRE(decode(payload.data(), payload.size(), dout, &err));
    CHECK(dout.comms.size() == kMaxComms);
}

TEST_CASE("FrameReader reassembles frames split anywhere, and skips nothing") {
    std::vector<uint8_t> stream;
    encode(sample_hello(), stream);
    encode(sample_digest(), stream);
    encode(KeepAlive{9}, stream);
    // A frame type from a newer minor: the reader hands it over, the caller skips it.
    const size_t unknown_at = stream.size();
    encode_bye(stream);
    stream[unknown_at + 8] = 99;
    encode_bye(stream);

    const std::vector<uint16_t> want = {1, 2, 3, 99, 4};
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{16}, size_t{1000}, stream.size()}) {
        INFO("chunk " << chunk);
        FrameReader r;
        std::vector<uint16_t> got;
        std::string err;
        for (size_t pos = 0; pos < stream.size(); pos += chunk) {
            r.feed(stream.data() + pos, std::min(chunk, stream.size() - pos));
            FrameHeader h;
            std::vector<uint8_t> payload;
            FrameReader::Status s;
            while ((s = r.next(h, payload, &err)) == FrameReader::Status::Frame) {
                got.push_back(h.type);
                CHECK(payload.size() == h.length);
                if (h.type == static_cast<uint16_t>(FrameType::Digest)) {
                    Digest d;
                    CHECK(decode(payload.data(), payload.size(), d, &err));
                }
            }
            REQUIRE(s == FrameReader::Status::NeedMore);
        }
        CHECK(got == want);
        CHECK(r.buffered() == 0);
    }
}

TEST_CASE("FrameReader fails on a bad header as soon as it is complete") {
    FrameReader r;
    std::vector<uint8_t> frame;
    encode(KeepAlive{1}, frame);
    put_u32(frame, 12, kMaxPayload + 1);
    FrameHeader h;
    std::vector<uint8_t> payload;
    std::string err;
    r.feed(frame.data(), 15);
    CHECK(r.next(h, payload, &err) == FrameReader::Status::NeedMore);
    r.feed(frame.data() + 15, 1);
    CHECK(r.next(h, payload, &err) == FrameReader::Status::Error);
    CHECK(err.find("exceeds") != std::string::npos);
}

TEST_CASE("Random bytes never crash the decoders") {
    std::mt19937 rng(1234);
    std::vector<uint8_t> frame, payload;
    encode(sample_hello(), frame);
    encode(sample_digest(), frame);
    std::string err;
    for (int iter = 0; iter < 2000; ++iter) {
        std::vector<uint8_t> b = frame;
        const int flips = 1 + static_cast<int>(rng() % 8);
        for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        b.resize(rng() % (b.size() + 1));
        Hello hm;
        Digest dm;
        DumpRequest rm;
        (void)decode(b.data(), b.size(), hm, &err);
        (void)decode(b.data(), b.size(), dm, &err);
        (void)decode(b.data(), b.size(), rm, &err);
        FrameReader r;
        r.feed(b.data(), b.size());
        FrameHeader h;
        while (r.next(h, payload, &err) == FrameReader::Status::Frame) {
        }
    }
    SUCCEED();
}

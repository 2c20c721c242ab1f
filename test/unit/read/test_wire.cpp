// The live protocol codec: round trips, every truncation rejected, hostile lengths and counts, version rules, and
// stream reassembly.
#include "read/wire_io.h"  // the blocks: a signature as a 1.9 sender writes it
#include "wire_fixtures.h"

using namespace wire_fixtures;
using namespace ncw;
using namespace ncw::wire;

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
    CHECK_FALSE(out.resumed);
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
    in.comms.push_back(sample_comm(7, kMaxDigestSigs + kMaxDigestEarlierSigs + 5));
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
    // The third had more signatures than a digest carries: the newest kMaxDigestSigs and the kMaxDigestEarlierSigs
    // before them (1.12) survive.
    REQUIRE(out.comms[2].recent.size() == kMaxDigestSigs + kMaxDigestEarlierSigs);
    CHECK(out.comms[2].recent.front().seq == in.comms[2].recent[5].seq);
    CHECK(out.comms[2].recent.back().seq == in.comms[2].recent.back().seq);
}

TEST_CASE("Digest 1.10: a signature's origin rides at the end of its block; a 1.9 block without it reads as a call") {
    const CommInfo in = sample_comm(0, 2);
    REQUIRE(in.recent[1].origin == 1);
    const std::vector<uint8_t> payload = one_comm_payload(in);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == 1);
    REQUIRE(out.comms[0].recent.size() == 2);
    CHECK(out.comms[0].recent[0].origin == 0);
    CHECK(out.comms[0].recent[1].origin == 1);
    // A 1.9 sender: each signature block one byte shorter (its length says so), the origin absent.
    std::vector<uint8_t> bytes;
    Writer w(bytes);
    const SigInfo s = in.recent[1];
    const size_t at = w.begin_block();
#define NCW_PUT_1_9(type, name, ...) w.type(s.name);
    NCW_SIG_FIELDS_1_9(NCW_PUT_1_9)
#undef NCW_PUT_1_9
    w.end_block(at);
    Reader r(bytes.data(), bytes.size());
    SigInfo got;
    got.origin = 7;
    get_sig(r, got);
    REQUIRE(r.ok());
    CHECK(got.seq == s.seq);
    CHECK(got.stream == s.stream);
    CHECK(got.origin == 7);  // left as it was: the caller's default (0, a call)
}

TEST_CASE("Digest 1.1: the newest in-collective GPU times ride along; a 1.0 comm block has none") {
    Digest in = sample_digest();
    CommInfo many = sample_comm(7, 2);
    for (uint64_t s = 1; s <= kMaxDigestSpans + 9; ++s) many.gpu_spans.push_back({s, s * 10, s * 100});
    in.comms.push_back(many);
    std::vector<uint8_t> frame, payload;
    encode(in, frame);
    split(frame, payload);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == 3);
    check_same(out.comms[0], in.comms[0]);
    CHECK(out.comms[1].gpu_spans.empty());
    REQUIRE(out.comms[2].gpu_spans.size() == kMaxDigestSpans);
    CHECK(out.comms[2].gpu_spans.front().seq == 10);
    CHECK(out.comms[2].gpu_spans.back().t_end_ns == (kMaxDigestSpans + 9) * 100);

    // A 1.0 sender's comm block ends after its signatures: the same digest without the span count decodes, with
    // no spans.
    Digest old;
    old.comms = {sample_comm(3, 2)};
    old.comms[0].gpu_uuid.clear();  // a 1.0 sender has none (protocol 1.5)
    frame.clear();
    encode(old, frame);
    split(frame, payload);
    // The comm block's last fields: its span count (0), its GPU UUID (""), its earlier signatures' count (0).
    drop_first_comm_tail(payload, 12);
    Digest back;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    REQUIRE(back.comms.size() == 1);
    check_same(back.comms[0], old.comms[0]);
}

TEST_CASE("Digest 1.5: the format-1.6 comm fields (the GPU UUID) follow a comm block's spans; a 1.4 block has none") {
    CommInfo sent = sample_comm(3, 2);
    std::vector<uint8_t> payload = one_comm_payload(sent);
    sent.gpu_spans = {{1, 2, 3}};
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == 1);
    CHECK(out.comms[0].gpu_uuid == "GPU-5d3f1a2b-0c4d-4e5f-8a9b-0c1d2e3f4a5b");
    check_same(out.comms[0], sent);

    // A 1.4 sender's comm block ends after its spans: the UUID is "" and everything before it the same. (A 1.4
    // decoder, conversely, stops reading at the spans: the fields after them are the bytes it skips.)
    drop_first_comm_tail(payload, 4 + sent.gpu_uuid.size() + 4);  // and 1.12's earlier signatures' count (0)
    Digest back;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    REQUIRE(back.comms.size() == 1);
    CHECK(back.comms[0].gpu_uuid.empty());
    CHECK(back.comms[0].gpu_spans.size() == 1);
    sent.gpu_uuid.clear();
    check_same(back.comms[0], sent);
}

TEST_CASE("Digest 1.3: communicators past kMaxComms follow the first kMaxComms; a 1.2 decoder reads those alone") {
    Digest in;
    in.sent_mono_ns = 1;
    for (uint32_t i = 0; i < 200; ++i) {
        in.comms.push_back(sample_comm(i < kMaxComms ? i : kNoCommSlot, kMaxDigestSigs));
        in.comms.back().comm_id = 1000 + i;
    }
    std::vector<uint8_t> frame, payload;
    CHECK(encode(in, frame) == 200);
    split(frame, payload);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == 200);
    for (size_t i = 0; i < 200; ++i) check_same(out.comms[i], in.comms[i]);
    CHECK(out.comms[150].slot == kNoCommSlot);

    // A 1.2 collector reads the comm count (64) and that many blocks, and ignores the bytes after them: the same
    // payload cut after the 64th block is what it sees.
    size_t at = 8 + 4 + 4;
    for (uint32_t i = 0; i < kMaxComms; ++i) {
        uint32_t len = 0;
        for (int b = 0; b < 4; ++b) len |= uint32_t(payload[at + size_t(b)]) << (8 * b);
        at += 4 + len;
    }
    std::vector<uint8_t> head(payload.begin(), payload.begin() + ptrdiff_t(at));
    Digest old;
    REQUIRE(decode(head.data(), head.size(), old, &err));
    CHECK(old.comms.size() == kMaxComms);
}

TEST_CASE("Digest 1.3: more communicators than a frame holds end at kMaxPayload, and the encoder says how many went") {
    Digest in;
    for (uint32_t i = 0; i < 5000; ++i) {
        in.comms.push_back(sample_comm(i < kMaxComms ? i : kNoCommSlot, kMaxDigestSigs));
        for (uint64_t s = 1; s <= kMaxDigestSpans; ++s) in.comms.back().gpu_spans.push_back({s, s, s});
    }
    std::vector<uint8_t> frame, payload;
    const size_t sent = encode(in, frame);
    CHECK(sent > kMaxComms);
    CHECK(sent < 5000);
    CHECK(frame.size() <= kHeaderBytes + kMaxPayload);
    split(frame, payload);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.comms.size() == sent);
}

TEST_CASE("Digest 1.4: the Python stacks ride along, after the comms past kMaxComms, cut at a line's end") {
    Digest in = sample_digest();
    in.py_stacks = PyStacksBlock{12, 345, 2, 1, "Thread 0x1 (most recent call first):\n  File \"a.py\", line 3 in f\n"};
    std::vector<uint8_t> frame, payload;
    encode(in, frame);
    split(frame, payload);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.py_stacks);
    CHECK(out.py_stacks->seq == 12);
    CHECK(out.py_stacks->mono_ns == 345);
    CHECK(out.py_stacks->reason == 2);
    CHECK(out.py_stacks->status == 1);
    CHECK(out.py_stacks->text == in.py_stacks->text);
    REQUIRE(out.comms.size() == in.comms.size());

    // With communicators past kMaxComms: the stacks follow them, and the frame keeps room for them.
    Digest many = in;
    for (uint32_t i = 0; i < 5000; ++i) many.comms.push_back(sample_comm(kNoCommSlot, kMaxDigestSigs));
    frame.clear();
    const size_t went = encode(many, frame);
    CHECK(frame.size() <= kHeaderBytes + kMaxPayload);
    split(frame, payload);
    Digest both;
    REQUIRE(decode(payload.data(), payload.size(), both, &err));
    CHECK(both.comms.size() == went);
    REQUIRE(both.py_stacks);
    CHECK(both.py_stacks->text == in.py_stacks->text);

    // Without the block (a 1.3 sender): no stacks.
    Digest old = sample_digest();
    frame.clear();
    encode(old, frame);
    split(frame, payload);
    Digest back;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    CHECK_FALSE(back.py_stacks);

    // A capture bigger than a digest carries: what fits, up to the end of its last whole line.
    HeaderInfo h;
    h.py_stacks_seq = 4;
    h.py_stacks_status = 1;
    std::string line = "  File \"/a/very/long/path/to/the/user/code/train.py\", line 100 in step\n";
    while (h.py_stacks_text.size() < 3 * kMaxDigestPyStacks) h.py_stacks_text += line;
    const PyStacksBlock b = py_stacks_block(h);
    CHECK(b.text.size() <= kMaxDigestPyStacks);
    CHECK(b.text.size() > kMaxDigestPyStacks - line.size());
    CHECK(b.text.back() == '\n');
    CHECK(b.text.size() % line.size() == 0);

    // A text over the limit is refused by the decoder (an encoder never sends one: it clamps).
    in.py_stacks->text = std::string(kMaxDigestPyStacks, 'x');
    frame.clear();
    encode(in, frame);
    split(frame, payload);
    const size_t text_len_at = payload.size() - kMaxDigestPyStacks - 4;
    put_u32(payload, text_len_at, kMaxDigestPyStacks + 1);
    Digest bad;
    CHECK_FALSE(decode(payload.data(), payload.size(), bad, &err));
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

TEST_CASE("A Hello says whether the rank reconnects (protocol 1.15)") {
    Hello in = sample_hello();
    in.resumed = true;
    std::vector<uint8_t> frame, payload;
    encode(in, frame);
    split(frame, payload);
    Hello out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.resumed);
    CHECK(out.file == in.file);
    every_truncation_fails<Hello>(payload);
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
    SECTION("1.3: extra comm count above kMaxExtraComms or past the end") {
        std::vector<uint8_t> payload(8 + 4 + 4 + 4, 0);  // no comms, then the extra count
        put_u32(payload, 16, kMaxExtraComms + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("extra comm count") != std::string::npos);
        put_u32(payload, 16, 2);
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        put_u32(payload, 16, 0);
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        CHECK(m.comms.empty());
    }
    SECTION("signature count above kMaxDigestSigs") {
        Digest d;
        d.comms = {sample_comm(0, 1)};
        std::vector<uint8_t> frame, payload;
        encode(d, frame);
        split(frame, payload);
        // The signature count sits right before the one signature block (its length, 3 * 8, 3 * 1, 3 * 4, 8, and the
        // origin byte of protocol 1.10), which the comm block's GPU span count (1.1, here 0) and its format-1.6 fields
        // (protocol 1.5: the GPU UUID, a string) follow.
        const size_t sig_block = 4 + 8 + 8 + 8 + 3 + 4 + 4 + 4 + 8 + 1;
        const size_t tail_1_6 = 4 + d.comms[0].gpu_uuid.size() + 4;  // and 1.12's earlier signatures' count (0)
        const size_t at = payload.size() - tail_1_6 - 4 - sig_block - 4;
        REQUIRE(payload[at] == 1);
        put_u32(payload, at, kMaxDigestSigs + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("signature count") != std::string::npos);
    }
    SECTION("GPU span count above kMaxDigestSpans") {
        Digest d;
        d.comms = {sample_comm(0, 0)};
        d.comms[0].gpu_spans = {{1, 2, 3}};
        std::vector<uint8_t> frame, payload;
        encode(d, frame);
        split(frame, payload);
        // The span count, before its one span block and the format-1.6 fields (the GPU UUID, a string).
        const size_t at = payload.size() - 4 - (4 + d.comms[0].gpu_uuid.size()) - (4 + 3 * 8) - 4;
        REQUIRE(payload[at] == 1);
        put_u32(payload, at, kMaxDigestSpans + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("gpu span count") != std::string::npos);
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

TEST_CASE("1.7: a Relay frame carries one whole frame under its channel; RelayClose its channel; nothing nests") {
    std::vector<uint8_t> inner;
    encode(KeepAlive{123}, inner);
    std::vector<uint8_t> frame;
    encode_relay(0xA1B2C3D4u, inner.data(), inner.size(), frame);
    std::vector<uint8_t> payload;
    const FrameHeader h = split(frame, payload);
    CHECK(h.type == uint16_t(FrameType::Relay));
    uint32_t channel = 0;
    FrameHeader ih;
    std::string err;
    REQUIRE(decode_relay(payload.data(), payload.size(), channel, ih, &err));
    CHECK(channel == 0xA1B2C3D4u);
    CHECK(ih.type == uint16_t(FrameType::KeepAlive));
    KeepAlive k;
    REQUIRE(decode(payload.data() + kRelayPrefixBytes + kHeaderBytes, ih.length, k, &err));
    CHECK(k.sent_mono_ns == 123);

    SECTION("a wrapped frame whose length is not what follows") {
        payload.push_back(0);
        CHECK_FALSE(decode_relay(payload.data(), payload.size(), channel, ih, &err));
        CHECK(err.find("carries") != std::string::npos);
        payload.resize(payload.size() - 2);
        CHECK_FALSE(decode_relay(payload.data(), payload.size(), channel, ih, &err));
    }
    SECTION("a relay frame inside a relay frame") {
        std::vector<uint8_t> outer;
        encode_relay(1, frame.data(), frame.size(), outer);
        std::vector<uint8_t> p2;
        split(outer, p2);
        CHECK_FALSE(decode_relay(p2.data(), p2.size(), channel, ih, &err));
        CHECK(err == "a relay frame inside a relay frame");
    }
    SECTION("too short for a channel and a header; a bad wrapped magic") {
        CHECK_FALSE(decode_relay(payload.data(), 10, channel, ih, &err));
        payload[kRelayPrefixBytes] ^= 0xFF;
        CHECK_FALSE(decode_relay(payload.data(), payload.size(), channel, ih, &err));
        CHECK(err.find("bad magic") != std::string::npos);
    }
    SECTION("RelayClose") {
        std::vector<uint8_t> c;
        encode_relay_close(77, c);
        std::vector<uint8_t> p;
        CHECK(split(c, p).type == uint16_t(FrameType::RelayClose));
        uint32_t ch = 0;
        REQUIRE(decode_relay_close(p.data(), p.size(), ch, &err));
        CHECK(ch == 77);
        CHECK_FALSE(decode_relay_close(p.data(), 3, ch, &err));
    }
    SECTION("a Relay frame may exceed kMaxPayload by its prefix and header, and no more") {
        std::vector<uint8_t> hdr(kHeaderBytes, 0);
        FrameHeader v;
        const uint32_t magic = kMagic, len_ok = kMaxRelayPayload, len_bad = kMaxRelayPayload + 1;
        const uint16_t major = kMajor, relay = uint16_t(FrameType::Relay), hello = uint16_t(FrameType::Hello);
        std::memcpy(&hdr[0], &magic, 4);
        std::memcpy(&hdr[4], &major, 2);
        std::memcpy(&hdr[8], &relay, 2);
        std::memcpy(&hdr[12], &len_ok, 4);
        CHECK(decode_header(hdr.data(), hdr.size(), v, &err));
        std::memcpy(&hdr[12], &len_bad, 4);
        CHECK_FALSE(decode_header(hdr.data(), hdr.size(), v, &err));
        std::memcpy(&hdr[8], &hello, 2);
        std::memcpy(&hdr[12], &len_ok, 4);
        CHECK_FALSE(decode_header(hdr.data(), hdr.size(), v, &err));
    }
}

TEST_CASE("1.11: a State ends with when its point-to-point counts were read; a 1.10 State reads as not said") {
    State st;
    st.sent_mono_ns = 5'000'000'000;
    st.p2p_read = true;
    verdict::PeerP2p p;
    p.peer = 1;
    p.recvs_issued = 2, p.recvs_completed = 2;
    st.p2p = {FileSnapshot::P2pTable{0xabc, {p}}};
    st.p2p_read_mono_ns = 4'200'000'000;  // read 0.8 s before this State went out (the cached table)
    std::vector<uint8_t> frame, payload;
    encode(st, frame);
    split(frame, payload);
    State back;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    CHECK(back.p2p_read_mono_ns == 4'200'000'000);
    CHECK(back.sent_mono_ns == 5'000'000'000);
    REQUIRE(back.p2p.size() == 1);
    CHECK(back.p2p[0].peers[0].recvs_issued == 2);
    for (size_t cut = 1; cut < 8; ++cut) {  // a field cut short is an error, not a time
        std::vector<uint8_t> t(payload.begin(), payload.end() - long(cut));
        CHECK_FALSE(decode(t.data(), t.size(), back, &err));
    }
    payload.resize(payload.size() - 8);  // a 1.10 sender: no reading time
    State old;
    REQUIRE(decode(payload.data(), payload.size(), old, &err));
    CHECK(old.p2p_read_mono_ns == 0);
    CHECK(old.p2p.size() == 1);
}

// A State of one communicator's table with peer `p`, encoded: its payload; `back` is it decoded, its one peer checked
// field by field against `p`.
std::vector<uint8_t> state_round_trip(const verdict::PeerP2p& p, State& back) {
    State st;
    st.sent_mono_ns = 42;
    st.p2p_read = true;
    st.p2p = {FileSnapshot::P2pTable{0xabc, {p}}};
    std::vector<uint8_t> frame, payload;
    encode(st, frame);
    split(frame, payload);
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    REQUIRE(back.p2p.size() == 1);
    REQUIRE(back.p2p[0].peers.size() == 1);
    const verdict::PeerP2p& q = back.p2p[0].peers[0];
#define NCW_SAME_PEER(type, name, kind, init) CHECK(q.name == p.name);
    NCW_PEER_P2P_FIELDS(NCW_SAME_PEER)
#undef NCW_SAME_PEER
    every_truncation_fails<State>(payload);
    return payload;
}

TEST_CASE("1.8: a State's peer block ends with the sends and receives the GPU started; a 1.7 block has none") {
    verdict::PeerP2p p;
    p.peer = 3;
    p.sends_issued = 9, p.sends_reached = 8, p.sends_completed = 7;
    p.recvs_issued = 6, p.recvs_reached = 6, p.recvs_completed = 5;
    p.t_oldest_send_pending_ns = 11, p.t_oldest_recv_pending_ns = 12;
    State back;
    std::vector<uint8_t> payload = state_round_trip(p, back);
    std::string err;

    // A 1.7 sender's peer block (the last bytes of this payload) ends before the reached counts (and the 1.13 GPU
    // times and op window's count after them): they read as 0 (not known), the rest the same. Its length and its
    // table's lose them.
    constexpr size_t tail = 16 + 32 + 4, peer_len = 4 + 6 * 8 + tail, table_len = 8 + 4 + 4 + peer_len;
    const size_t peer_at = payload.size() - peer_len - 4, table_at = payload.size() - table_len - 4;
    payload.resize(payload.size() - tail);
    put_u32(payload, peer_at, uint32_t(peer_len - tail));
    put_u32(payload, table_at, uint32_t(table_len - tail));
    State old;
    REQUIRE(decode(payload.data(), payload.size(), old, &err));
    REQUIRE(old.p2p.size() == 1);
    REQUIRE(old.p2p[0].peers.size() == 1);
    CHECK(old.p2p[0].peers[0].sends_reached == 0);
    CHECK(old.p2p[0].peers[0].recvs_reached == 0);
    CHECK(old.p2p[0].peers[0].sends_completed == 7);
    CHECK(old.p2p[0].peers[0].t_oldest_recv_pending_ns == 12);
}

TEST_CASE(
    "Digest 1.12: the earlier signatures follow a comm block's format-1.6 fields, merged in order; a 1.11 block "
    "has none") {
    CommInfo sent = sample_comm(3, kMaxDigestSigs + 10);
    std::vector<uint8_t> payload = one_comm_payload(sent);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == 1);
    REQUIRE(out.comms[0].recent.size() == kMaxDigestSigs + 10);
    for (size_t i = 0; i < out.comms[0].recent.size(); ++i) CHECK(out.comms[0].recent[i].seq == sent.recent[i].seq);

    // A 1.11 sender's block ends before them: its newest kMaxDigestSigs alone. (A 1.11 decoder, conversely, skips
    // them as the trailing bytes of the block.)
    CommInfo old = sample_comm(3, kMaxDigestSigs);
    payload = one_comm_payload(old);
    drop_first_comm_tail(payload, 4);
    Digest back;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    REQUIRE(back.comms.size() == 1);
    CHECK(back.comms[0].recent.size() == kMaxDigestSigs);

    SECTION("a sender's earlier signatures out of order or repeating the newest: one per seq, in order") {
        CommInfo odd = sample_comm(3, kMaxDigestSigs + 3);
        auto& r = odd.recent.mut();
        std::swap(r[0], r[2]);                     // earlier ones out of order
        r[1].seq = r[kMaxDigestSigs + 3 - 1].seq;  // one of them repeats the newest's seq
        payload = one_comm_payload(odd);
        Digest m;
        REQUIRE(decode(payload.data(), payload.size(), m, &err));
        const auto& got = m.comms[0].recent;
        REQUIRE(got.size() == kMaxDigestSigs + 2);
        for (size_t i = 1; i < got.size(); ++i) CHECK(got[i - 1].seq < got[i].seq);
    }
    SECTION("an earlier signature count above kMaxDigestEarlierSigs is refused") {
        payload = one_comm_payload(sample_comm(3, 1));
        put_u32(payload, payload.size() - 4, kMaxDigestEarlierSigs + 1);
        Digest m;
        CHECK_FALSE(decode(payload.data(), payload.size(), m, &err));
        CHECK(err.find("earlier signature count") != std::string::npos);
    }
}

TEST_CASE("Digest 1.12: with every string at its longest, the earlier signatures give way and the frame still fits") {
    Digest in;
    in.sent_mono_ns = 1;
    for (uint32_t i = 0; i < kMaxComms; ++i) {
        CommInfo c = sample_comm(i, kMaxDigestSigs + kMaxDigestEarlierSigs);
        c.name.assign(kMaxString, 'n');
        c.pci_bus_id.assign(kMaxString, 'p');
        c.gpu_uuid.assign(kMaxString, 'u');
        c.gpu_spans.assign(kMaxDigestSpans, verdict::GpuSpan{1, 2, 3});
        in.comms.push_back(c);
    }
    std::vector<uint8_t> frame, payload;
    CHECK(encode(in, frame) == kMaxComms);
    split(frame, payload);
    CHECK(payload.size() <= kMaxPayload);
    Digest out;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    REQUIRE(out.comms.size() == kMaxComms);
    CHECK(out.comms[0].recent.size() == kMaxDigestSigs);
    CHECK(out.comms[kMaxComms - 1].recent.back().seq == in.comms[kMaxComms - 1].recent.back().seq);
    // Short strings, as real ranks have: every signature goes.
    for (auto& c : in.comms) c.name = c.pci_bus_id = c.gpu_uuid = "x";
    frame.clear();
    encode(in, frame);
    split(frame, payload);
    REQUIRE(decode(payload.data(), payload.size(), out, &err));
    CHECK(out.comms[0].recent.size() == kMaxDigestSigs + kMaxDigestEarlierSigs);
}

TEST_CASE("1.13: a State's peer block ends with the newest sends and receives; a 1.12 block has none") {
    verdict::PeerP2p p;
    p.peer = 3;
    p.sends_issued = 9, p.sends_completed = 8;
    p.sends_gpu_ns = 1500, p.sends_gpu_timed = 7, p.recvs_gpu_ns = 20'000'000, p.recvs_gpu_timed = 32;
    for (uint64_t seq = 6; seq <= 9; ++seq) {
        verdict::P2pOp o;
        o.seq = seq, o.count = 1000 * seq, o.stream = 0x5000, o.t_issue_ns = 77 + seq, o.group_id = uint32_t(seq);
        o.dtype = 7, o.send = 1;
        o.state = seq < 9 ? verdict::P2pOp::kReturned | verdict::P2pOp::kDone : verdict::P2pOp::kReturned;
        p.ops.push_back(o);
    }
    State back;
    std::vector<uint8_t> payload = state_round_trip(p, back);
    std::string err;
    const verdict::PeerP2p& q = back.p2p[0].peers[0];
    REQUIRE(q.ops.size() == p.ops.size());
    for (size_t i = 0; i < p.ops.size(); ++i) {
#define NCW_SAME_OP(type, name, kind) CHECK(q.ops[i].name == p.ops[i].name);
        NCW_P2P_OP_FIELDS(NCW_SAME_OP)
#undef NCW_SAME_OP
    }
    CHECK(q.op(true, 9) != nullptr);
    CHECK(q.op(true, 9)->bytes() == 9000 * 4);
    CHECK_FALSE(q.op(true, 9)->done());
    CHECK(q.op(false, 9) == nullptr);

    // A 1.12 sender's peer block ends before the GPU times and the window: no ops (not known), the counts the same.
    const size_t ops_bytes = 32 + 4 + p.ops.size() * kP2pOpBytes;
    constexpr size_t head = 4 + 6 * 8 + 16;
    const size_t peer_len = head + ops_bytes, table_len = 8 + 4 + 4 + peer_len;
    const size_t peer_at = payload.size() - peer_len - 4, table_at = payload.size() - table_len - 4;
    payload.resize(payload.size() - ops_bytes);
    put_u32(payload, peer_at, uint32_t(head));
    put_u32(payload, table_at, uint32_t(table_len - ops_bytes));
    State old;
    REQUIRE(decode(payload.data(), payload.size(), old, &err));
    REQUIRE(old.p2p[0].peers.size() == 1);
    CHECK(old.p2p[0].peers[0].ops.empty());
    CHECK(old.p2p[0].peers[0].recvs_gpu_timed == 0);
    CHECK(old.p2p[0].peers[0].sends_completed == 8);

    // A hostile count of ops: refused, never allocated.
    State again;
    std::vector<uint8_t> bad_payload = state_round_trip(p, again);
    const size_t count_at = bad_payload.size() - ops_bytes + 32;
    put_u32(bad_payload, count_at, 0xffffffffu);
    State hostile;
    CHECK_FALSE(decode(bad_payload.data(), bad_payload.size(), hostile, &err));
}

TEST_CASE("1.16: a relay's RelayPeer round-trips; a newer minor's fields in its block are skipped, a cut one refused") {
    RelayPeer m;
    m.channel = 42;
    m.result = RelayPeer::Refused;
    m.flags = kPeerUidKnown | kPeerGidKnown;
    m.pid = 4242;
    m.pid_ns = 4026531836ull;
    m.uid = 65534;
    m.gid = 65533;
    m.why = "claims pid 31337, but its socket is held by pid 4242 (uid 65534)";
    std::vector<uint8_t> frame, payload;
    encode(m, frame);
    CHECK(split(frame, payload).type == uint16_t(FrameType::RelayPeer));
    RelayPeer back;
    std::string err;
    REQUIRE(decode(payload.data(), payload.size(), back, &err));
    CHECK(back.channel == 42);
    CHECK(back.result == RelayPeer::Refused);
    CHECK(back.flags == (kPeerUidKnown | kPeerGidKnown));
    CHECK(back.pid == 4242);
    CHECK(back.pid_ns == 4026531836ull);
    CHECK(back.uid == 65534);
    CHECK(back.gid == 65533);
    CHECK(back.why == m.why);

    SECTION("a field a newer minor appends inside the block is skipped") {
        std::vector<uint8_t> longer = payload;
        longer.insert(longer.end(), {1, 2, 3, 4});
        uint32_t block = 0;
        std::memcpy(&block, &longer[4], 4);
        block += 4;
        std::memcpy(&longer[4], &block, 4);
        RelayPeer newer;
        REQUIRE(decode(longer.data(), longer.size(), newer, &err));
        CHECK(newer.pid == 4242);
        CHECK(newer.why == m.why);
    }
    SECTION("a cut frame, or a verdict that is none, is refused and leaves the value as it was") {
        RelayPeer untouched;
        for (size_t n = 0; n < payload.size(); ++n) CHECK_FALSE(decode(payload.data(), n, untouched, &err));
        CHECK(untouched.channel == 0);
        payload[8] = 7;  // result
        CHECK_FALSE(decode(payload.data(), payload.size(), untouched, &err));
        CHECK(err.find("not a verdict") != std::string::npos);
        CHECK(untouched.channel == 0);
    }
}

// The wire codec against hostile input: foreign magic and versions, the encoder's clamps, frames split anywhere,
// random bytes.
#include "wire_fixtures.h"

using namespace wire_fixtures;
using namespace ncw;
using namespace ncw::wire;

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

    // 1.3: comms past kMaxComms ride after them, up to kMaxExtraComms (and the payload's bound, test_wire.cpp).
    Digest d;
    for (uint32_t i = 0; i < kMaxComms + kMaxExtraComms + 3; ++i) d.comms.push_back(sample_comm(i, 0));
    frame.clear();
    const size_t sent = encode(d, frame);
    split(frame, payload);
    Digest dout;
    REQUIRE(decode(payload.data(), payload.size(), dout, &err));
    CHECK(dout.comms.size() == sent);
    CHECK(sent > kMaxComms);
    CHECK(sent <= kMaxComms + kMaxExtraComms);
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

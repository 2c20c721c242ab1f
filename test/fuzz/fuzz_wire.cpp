// libFuzzer target: the live protocol's frame reassembly and every payload decoder (lib/read/wire.h).
// Whatever the bytes, the decoders must return false or a value that encodes and decodes again.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "read/wire.h"

namespace {

using namespace ncw::wire;

template <class T>
void roundtrip(const T& m) {
    std::vector<uint8_t> out;
    encode(m, out);
    FrameHeader h;
    std::string err;
    if (out.size() < kHeaderBytes || !decode_header(out.data(), out.size(), h, &err)) abort();
    T again;
    if (!decode(out.data() + kHeaderBytes, out.size() - kHeaderBytes, again, &err)) abort();
}

template <class T>
void try_decode(const uint8_t* p, size_t n) {
    T m;
    std::string err;
    if (decode(p, n, m, &err)) roundtrip(m);
}

void decode_payload(uint16_t type, const uint8_t* p, size_t n) {
    switch (FrameType(type)) {
        case FrameType::Hello: try_decode<Hello>(p, n); break;
        case FrameType::Digest: try_decode<Digest>(p, n); break;
        case FrameType::KeepAlive: try_decode<KeepAlive>(p, n); break;
        case FrameType::Reject: try_decode<Reject>(p, n); break;
        case FrameType::DumpRequest: try_decode<DumpRequest>(p, n); break;
        case FrameType::Relay: {  // 1.7: the wrapped frame's payload, decoded as its own type (it never nests)
            uint32_t channel = 0;
            FrameHeader inner;
            std::string err;
            if (!decode_relay(p, n, channel, inner, &err)) break;
            if (inner.type == uint16_t(FrameType::Relay) || inner.length > kMaxPayload ||
                inner.length != n - kRelayPrefixBytes - kHeaderBytes)
                abort();
            decode_payload(inner.type, p + kRelayPrefixBytes + kHeaderBytes, inner.length);
            break;
        }
        case FrameType::RelayClose: {
            uint32_t channel = 0;
            std::string err;
            decode_relay_close(p, n, channel, &err);
            break;
        }
        case FrameType::RelayPeer: try_decode<RelayPeer>(p, n); break;  // 1.16
        default: break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    // First byte: how the stream is cut into reads (1..16 chunks), so partial frames are exercised too.
    const size_t chunks = 1 + (data[0] & 15);
    const uint8_t* p = data + 1;
    const size_t n = size - 1;

    FrameReader reader;
    FrameHeader h;
    std::vector<uint8_t> payload;
    std::string err;
    const size_t step = n / chunks + 1;
    bool dead = false;
    for (size_t off = 0; off < n && !dead; off += step) {
        reader.feed(p + off, std::min(step, n - off));
        for (int frames = 0; frames < 4096; ++frames) {
            const auto s = reader.next(h, payload, &err);
            if (s == FrameReader::Status::NeedMore) break;
            if (s == FrameReader::Status::Error) {
                dead = true;
                break;
            }
            const uint32_t limit = h.type == uint16_t(FrameType::Relay) ? kMaxRelayPayload : kMaxPayload;
            if (h.length != payload.size() || payload.size() > limit) abort();
            decode_payload(h.type, payload.data(), payload.size());
        }
    }

    // The same bytes straight into each decoder, without a valid header in front.
    decode_payload(uint16_t(FrameType::Hello), p, n);
    decode_payload(uint16_t(FrameType::Digest), p, n);
    decode_payload(uint16_t(FrameType::KeepAlive), p, n);
    decode_payload(uint16_t(FrameType::Reject), p, n);
    decode_payload(uint16_t(FrameType::DumpRequest), p, n);
    decode_payload(uint16_t(FrameType::Relay), p, n);
    decode_payload(uint16_t(FrameType::RelayClose), p, n);
    decode_payload(uint16_t(FrameType::RelayPeer), p, n);
    decode_header(p, n, h, &err);
    return 0;
}

// The live protocol codec (read/wire.h, over the frame format of include/ncclwatch/wire.h).
//
// This file: the frames and their payloads. The byte codec is read/wire_io.h; the nested records (the HeaderInfo of a
// Hello, each CommInfo of a Digest, each SigInfo) are blocks generated from the format's lists (wire_fields.cpp): u32
// length, then fields. A newer minor appends fields at the end of a block, and an older decoder skips what it does
// not know, so the "append only" rule holds inside repeated structures too, not just at the end of a payload.
//
// The encoder clamps what it writes to the decoder's limits (strings, env entries, comms, signatures, payload size),
// so whatever one side encodes the other side accepts.
#include "read/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "read/wire_io.h"

namespace ncw::wire {

namespace {

// Appends a header with a placeholder length; finish_frame() sets it.
size_t begin_frame(Writer& w, FrameType type) {
    const size_t at = w.size();
    w.u32(kMagic);
    w.u16(kMajor);
    w.u16(kMinor);
    w.u16(static_cast<uint16_t>(type));
    w.u16(0);  // flags
    w.u32(0);  // length
    return at;
}
void finish_frame(Writer& w, size_t at) { w.put_u32(at + 12, static_cast<uint32_t>(w.size() - at - kHeaderBytes)); }

// Fixed part of a Hello payload besides token, file and the header's env: a generous bound so the env budget leaves
// room for the rest.
constexpr size_t kHelloFixedBytes = 512;

}  // namespace

// ---- Encoding ----

void encode(const Hello& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Hello);
    w.str(m.token);
    const size_t fixed = kHelloFixedBytes + encoded_size(m.token) + encoded_size(m.file) + encoded_size(m.header.host) +
                         encoded_size(m.header.job_id);
    put_header(w, m.header, kMaxPayload > fixed ? kMaxPayload - fixed : 0, m.resumed ? kHelloResumed : 0);
    w.str(m.file);
    finish_frame(w, at);
}

size_t encode(const Digest& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Digest);
    w.u64(m.sent_mono_ns);
    w.u32(m.process_state);
    // At most kMaxComms comms of at most kMaxDigestSigs signatures with clamped strings: well under kMaxPayload. With
    // 1.12's earlier signatures too, only where they fit (the strings at their longest would not leave room for them):
    // else the comms again without them.
    const size_t py_room = m.py_stacks ? 64 + std::min<size_t>(m.py_stacks->text.size(), kMaxDigestPyStacks) : 0;
    const size_t n = std::min<size_t>(m.comms.size(), kMaxComms);
    w.u32(static_cast<uint32_t>(n));
    const size_t comms_at = w.size();
    for (size_t i = 0; i < n; ++i) put_comm(w, m.comms[i]);
    if (w.size() - at - kHeaderBytes + py_room > kMaxPayload) {
        out.resize(comms_at);
        for (size_t i = 0; i < n; ++i) put_comm(w, m.comms[i], false);
    }
    // 1.3: the comms past them, as many as the payload holds (older decoders ignore these trailing bytes), each
    // without 1.12's earlier signatures: a communicator more counts for more; 1.4: the Python stacks after them (then
    // the count is written even when it is 0), their room kept.
    uint32_t extra = 0;
    if (m.comms.size() > n || m.py_stacks) {
        const size_t count_at = w.size();
        w.u32(0);
        for (size_t i = n; i < m.comms.size() && extra < kMaxExtraComms; ++i) {
            const size_t before = w.size();
            put_comm(w, m.comms[i], false);
            if (w.size() - at - kHeaderBytes + py_room > kMaxPayload) {
                out.resize(before);  // this block would not fit: the frame ends with the previous one
                break;
            }
            ++extra;
        }
        w.put_u32(count_at, extra);
    }
    if (m.py_stacks) put_py_stacks(w, *m.py_stacks);  // 1.4, at most kMaxDigestPyStacks of text
    finish_frame(w, at);
    return n + extra;
}

// The wire's size of one op of a peer's window is its fields' (wire.h keeps the number, below the reader's list).
#define NCW_OP_WIRE_BYTES(type, name, kind) +sizeof(type)
static_assert(0 NCW_P2P_OP_FIELDS(NCW_OP_WIRE_BYTES) == kP2pOpBytes, "kP2pOpBytes and NCW_P2P_OP_FIELDS disagree");
#undef NCW_OP_WIRE_BYTES

void encode(const State& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::State);
    w.u64(m.sent_mono_ns);
    put_live(w, m.live);
    w.u8(uint8_t((m.p2p_read ? 1 : 0) | (m.p2p_wrapped ? 2 : 0)));
    const size_t n = std::min<size_t>(m.p2p.size(), kMaxStateP2pComms);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) {
        const FileSnapshot::P2pTable& t = m.p2p[i];
        const size_t b = w.begin_block();
        w.u64(t.comm_id);
        // The peers an op waits on first: a table cut to the limit keeps what a stall verdict reads.
        std::vector<const verdict::PeerP2p*> peers;
        for (const auto& p : t.peers) peers.push_back(&p);
        std::stable_partition(peers.begin(), peers.end(), [](const verdict::PeerP2p* p) {
            return p->sends_issued > p->sends_completed || p->recvs_issued > p->recvs_completed;
        });
        const size_t k = std::min<size_t>(peers.size(), kMaxStatePeers);
        w.u32(static_cast<uint32_t>(k));
        for (size_t j = 0; j < k; ++j) {
            const verdict::PeerP2p& p = *peers[j];
            const size_t pb = w.begin_block();
#define NCW_PUT_PEER(type, name, kind, init) w.kind(p.name);
            NCW_PEER_P2P_FIELDS(NCW_PUT_PEER)
#undef NCW_PUT_PEER
            // 1.13: the newest sends and receives, for pairing them by size (within a budget: the counts come first).
            const size_t ops = w.size() < kMaxStateP2pOpBytes ? std::min(p.ops.size(), 2 * verdict::kP2pOpWindow) : 0;
            w.u32(static_cast<uint32_t>(ops));
            for (size_t o = 0; o < ops; ++o) {
#define NCW_PUT_OP(type, name, kind) w.kind(p.ops[o].name);
                NCW_P2P_OP_FIELDS(NCW_PUT_OP)
#undef NCW_PUT_OP
            }
            w.end_block(pb);
        }
        w.end_block(b);
    }
    if (m.p2p_read_mono_ns) w.u64(m.p2p_read_mono_ns);  // 1.11
    finish_frame(w, at);
}

void encode(const KeepAlive& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::KeepAlive);
    w.u64(m.sent_mono_ns);
    finish_frame(w, at);
}

void encode_bye(std::vector<uint8_t>& out) {
    Writer w(out);
    finish_frame(w, begin_frame(w, FrameType::Bye));
}

void encode_hello_ack(std::vector<uint8_t>& out) {
    Writer w(out);
    finish_frame(w, begin_frame(w, FrameType::HelloAck));
}

void encode(const Reject& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Reject);
    w.str(m.reason);
    if (m.retry) out[at + 10] |= uint8_t(kFlagRetry);  // 1.2: in the header's flags, so older decoders ignore it
    finish_frame(w, at);
}

void encode(const Challenge& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Challenge);
    w.str(m.nonce);
    finish_frame(w, at);
}

void encode(const Proof& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Proof);
    w.str(m.mac);
    finish_frame(w, at);
}

void encode(const DumpRequest& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::DumpRequest);
    w.u64(m.request_id);
    w.str(m.reason);
    finish_frame(w, at);
}

void encode_relay(uint32_t channel, const uint8_t* frame, size_t n, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Relay);
    w.u32(channel);
    out.insert(out.end(), frame, frame + n);
    finish_frame(w, at);
}

void encode_relay_close(uint32_t channel, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::RelayClose);
    w.u32(channel);
    finish_frame(w, at);
}

void encode(const RelayPeer& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::RelayPeer);
    w.u32(m.channel);
    // A block, so that a newer minor appends its fields inside it and a cut one is still refused.
    const size_t b = w.begin_block();
    w.u32(m.result);
    w.u32(m.flags);
    w.i64(m.pid);
    w.u64(m.pid_ns);
    w.u32(m.uid);
    w.u32(m.gid);
    w.str(m.why);
    w.end_block(b);
    finish_frame(w, at);
}

// ---- Decoding ----

bool decode_header(const uint8_t* p, size_t n, FrameHeader& h, std::string* err) noexcept {
    auto fail = [&](std::string why) {
        if (err) *err = std::move(why);
        return false;
    };
    try {
        if (n < kHeaderBytes) return fail("frame header truncated (" + std::to_string(n) + " of 16 bytes)");
        Reader r(p, kHeaderBytes);
        FrameHeader v;
        v.magic = r.u32("magic");
        v.major = r.u16("major");
        v.minor = r.u16("minor");
        v.type = r.u16("type");
        v.flags = r.u16("flags");
        v.length = r.u32("length");
        if (v.magic != kMagic) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "bad magic 0x%08x (not an ncclwatch live frame)", v.magic);
            return fail(buf);
        }
        if (v.major != kMajor)
            return fail("protocol version " + std::to_string(v.major) + "." + std::to_string(v.minor) +
                        " not supported (this side speaks " + std::to_string(kMajor) + ".x)");
        const uint32_t limit = v.type == uint16_t(FrameType::Relay) ? kMaxRelayPayload : kMaxPayload;
        if (v.length > limit)
            return fail("frame payload of " + std::to_string(v.length) + " bytes exceeds the limit of " +
                        std::to_string(limit));
        h = v;
        return true;
    } catch (...) {
        return fail("out of memory");
    }
}

// Each decoder fills a fresh value and assigns it only when everything decoded, so a failure leaves `m` untouched.
template <class Msg, class Body>
static bool decode_with(const uint8_t* p, size_t n, Msg& m, std::string* err, Body body) noexcept {
    try {
        Reader r(p, n);
        Msg v;
        body(r, v);
        if (!r.finish(err)) return false;
        m = std::move(v);
        return true;
    } catch (...) {
        if (err) *err = "out of memory";
        return false;
    }
}

bool decode(const uint8_t* p, size_t n, Hello& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, Hello& v) {
        v.token = r.str("token");
        uint32_t flags = 0;
        get_header(r, v.header, &flags);
        v.resumed = flags & kHelloResumed;
        v.file = r.str("file");
    });
}

bool decode(const uint8_t* p, size_t n, Digest& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, Digest& v) {
        v.sent_mono_ns = r.u64("sent_mono_ns");
        v.process_state = r.u32("process_state");
        const uint32_t c = r.count("comm count", kMaxComms, kMinBlock);
        v.comms.assign(c, CommInfo{});
        for (uint32_t i = 0; i < c && r.ok(); ++i) get_comm(r, v.comms[i]);
        // 1.3: comms past the first kMaxComms (a 1.2 payload ends here).
        if (r.ok() && !r.at_end()) {
            const uint32_t e = r.count("extra comm count", kMaxExtraComms, kMinBlock);
            v.comms.resize(size_t(c) + e);
            for (uint32_t i = 0; i < e && r.ok(); ++i) get_comm(r, v.comms[c + i]);
        }
        if (r.ok() && !r.at_end()) get_py_stacks(r, v.py_stacks.emplace());  // 1.4
    });
}

bool decode(const uint8_t* p, size_t n, State& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, State& v) {
        v.sent_mono_ns = r.u64("sent_mono_ns");
        get_live(r, v.live);
        const uint8_t flags = r.u8("p2p flags");
        v.p2p_read = flags & 1;
        v.p2p_wrapped = flags & 2;
        const uint32_t c = r.count("p2p comm count", kMaxStateP2pComms, kMinBlock);
        v.p2p.assign(c, FileSnapshot::P2pTable{});
        for (uint32_t i = 0; i < c && r.ok(); ++i) {
            Reader b = r.block("p2p table");
            if (!r.ok()) break;
            v.p2p[i].comm_id = b.u64("comm_id");
            const uint32_t k = b.count("peer count", kMaxStatePeers, kMinBlock);
            v.p2p[i].peers.assign(k, verdict::PeerP2p{});
            for (uint32_t j = 0; j < k && b.ok(); ++j) {
                Reader pb = b.block("peer");
                if (!b.ok()) break;
                verdict::PeerP2p& p = v.p2p[i].peers[j];
#define NCW_GET_PEER(type, name, kind, init) p.name = pb.kind(#name);
                NCW_PEER_P2P_FIELDS_1_6(NCW_GET_PEER)
                if (!pb.at_end()) {  // 1.8
                    NCW_PEER_P2P_FIELDS_1_8(NCW_GET_PEER)
                }
                if (!pb.at_end()) {  // 1.13
                    NCW_PEER_P2P_FIELDS_1_13(NCW_GET_PEER)
                }
#undef NCW_GET_PEER
                if (!pb.at_end()) {  // 1.13
                    const uint32_t ops = pb.count("p2p op count", 2 * verdict::kP2pOpWindow, kP2pOpBytes);
                    p.ops.assign(ops, verdict::P2pOp{});
                    for (uint32_t o = 0; o < ops && pb.ok(); ++o) {
#define NCW_GET_OP(type, name, kind) p.ops[o].name = pb.kind(#name);
                        NCW_P2P_OP_FIELDS(NCW_GET_OP)
#undef NCW_GET_OP
                    }
                }
                b.absorb(pb);
            }
            r.absorb(b);
        }
        if (r.ok() && !r.at_end()) v.p2p_read_mono_ns = r.u64("p2p_read_mono_ns");  // 1.11
    });
}

bool decode(const uint8_t* p, size_t n, KeepAlive& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, KeepAlive& v) { v.sent_mono_ns = r.u64("sent_mono_ns"); });
}

bool decode(const uint8_t* p, size_t n, Reject& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, Reject& v) { v.reason = r.str("reason"); });
}

bool decode(const uint8_t* p, size_t n, Challenge& m, std::string* err) noexcept {
    Challenge v;
    if (!decode_with(p, n, v, err, [](Reader& r, Challenge& c) { c.nonce = r.str("nonce"); })) return false;
    if (v.nonce.size() != kChallengeBytes) {
        if (err) *err = "nonce: " + std::to_string(v.nonce.size()) + " bytes, not 32";
        return false;
    }
    m = std::move(v);
    return true;
}

bool decode(const uint8_t* p, size_t n, Proof& m, std::string* err) noexcept {
    Proof v;
    if (!decode_with(p, n, v, err, [](Reader& r, Proof& c) { c.mac = r.str("mac"); })) return false;
    if (!v.mac.empty() && v.mac.size() != 32) {
        if (err) *err = "mac: " + std::to_string(v.mac.size()) + " bytes, not 32";
        return false;
    }
    m = std::move(v);
    return true;
}

bool decode(const uint8_t* p, size_t n, DumpRequest& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, DumpRequest& v) {
        v.request_id = r.u64("request_id");
        v.reason = r.str("reason");
    });
}

bool decode_relay(const uint8_t* p, size_t n, uint32_t& channel, FrameHeader& inner, std::string* err) noexcept {
    if (n < kRelayPrefixBytes + kHeaderBytes) {
        if (err) *err = "relay frame of " + std::to_string(n) + " bytes: shorter than a channel and a frame header";
        return false;
    }
    FrameHeader h;
    if (!decode_header(p + kRelayPrefixBytes, n - kRelayPrefixBytes, h, err)) return false;
    if (h.type == uint16_t(FrameType::Relay) || h.type == uint16_t(FrameType::RelayClose)) {
        if (err) *err = "a relay frame inside a relay frame";
        return false;
    }
    if (h.length > kMaxPayload || h.length != n - kRelayPrefixBytes - kHeaderBytes) {
        if (err)
            *err = "relayed frame says " + std::to_string(h.length) + " payload bytes, carries " +
                   std::to_string(n - kRelayPrefixBytes - kHeaderBytes);
        return false;
    }
    channel = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    inner = h;
    return true;
}

bool decode_relay_close(const uint8_t* p, size_t n, uint32_t& channel, std::string* err) noexcept {
    struct Close {
        uint32_t channel = 0;
    } v;
    if (!decode_with(p, n, v, err, [](Reader& r, Close& c) { c.channel = r.u32("channel"); })) return false;
    channel = v.channel;
    return true;
}

bool decode(const uint8_t* p, size_t n, RelayPeer& m, std::string* err) noexcept {
    RelayPeer v;
    const bool ok = decode_with(p, n, v, err, [](Reader& outer, RelayPeer& x) {
        x.channel = outer.u32("channel");
        Reader r = outer.block("relay peer");
        if (!outer.ok()) return;
        x.result = r.u32("result");
        x.flags = r.u32("flags");
        x.pid = r.i64("pid");
        x.pid_ns = r.u64("pid_ns");
        x.uid = r.u32("uid");
        x.gid = r.u32("gid");
        x.why = r.str("why");
        outer.absorb(r);
    });
    if (!ok) return false;
    if (v.result > RelayPeer::Unproven) {
        if (err) *err = "relay peer.result: " + std::to_string(v.result) + " is not a verdict";
        return false;
    }
    m = std::move(v);
    return true;
}

// ---- Stream reassembly ----

void FrameReader::feed(const uint8_t* p, size_t n) {
    // Drop consumed bytes before growing, so the buffer holds at most one partial frame plus what was just read.
    if (pos_ > 0 && (pos_ == buf_.size() || pos_ >= 64 * 1024)) {
        buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
        pos_ = 0;
    }
    buf_.insert(buf_.end(), p, p + n);
}

FrameReader::Status FrameReader::next(FrameHeader& h, std::vector<uint8_t>& payload, std::string* err) {
    const size_t avail = buf_.size() - pos_;
    if (avail < kHeaderBytes) return Status::NeedMore;
    FrameHeader v;
    // The header is checked as soon as it is complete: a bad magic or a huge length fails now, before any payload
    // is buffered for it.
    if (!decode_header(buf_.data() + pos_, avail, v, err)) return Status::Error;
    if (avail - kHeaderBytes < v.length) return Status::NeedMore;
    const uint8_t* start = buf_.data() + pos_ + kHeaderBytes;
    payload.assign(start, start + v.length);
    pos_ += kHeaderBytes + v.length;
    if (pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
    }
    h = v;
    return Status::Frame;
}

}  // namespace ncw::wire

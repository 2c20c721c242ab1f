// The live protocol codec (read/wire.h, over the frame format of include/ncclwatch/wire.h).
//
// Nested records (the HeaderInfo of a Hello, each CommInfo of a Digest, each SigInfo) are blocks: u32 length, then
// fields. A newer minor appends fields at the end of a block, and an older decoder skips what it does not know, so
// the "append only" rule holds inside repeated structures too, not just at the end of a payload.
//
// The encoder clamps what it writes to the decoder's limits (strings, env entries, comms, signatures, payload size),
// so whatever one side encodes the other side accepts.
#include "read/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ncw::wire {

namespace {

// ---- Encoding ----

class Writer {
public:
    explicit Writer(std::vector<uint8_t>& out) : out_(out) {}

    void u8(uint8_t v) { out_.push_back(v); }
    void u16(uint16_t v) { le(v, 2); }
    void u32(uint32_t v) { le(v, 4); }
    void u64(uint64_t v) { le(v, 8); }
    void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
    void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
    void str(const std::string& s) {
        const size_t n = std::min<size_t>(s.size(), kMaxString);
        u32(static_cast<uint32_t>(n));
        out_.insert(out_.end(), s.data(), s.data() + n);
    }

    // Starts a length-prefixed block; end_block() fills in its length.
    size_t begin_block() {
        const size_t at = out_.size();
        u32(0);
        return at;
    }
    void end_block(size_t at) { put_u32(at, static_cast<uint32_t>(out_.size() - at - 4)); }

    size_t size() const { return out_.size(); }
    void put_u32(size_t at, uint32_t v) {
        for (int i = 0; i < 4; ++i) out_[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
    void put_u16(size_t at, uint16_t v) {
        for (int i = 0; i < 2; ++i) out_[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }

private:
    void le(uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    std::vector<uint8_t>& out_;
};

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

// Bytes a string takes once encoded (clamped like Writer::str).
size_t encoded_size(const std::string& s) { return 4 + std::min<size_t>(s.size(), kMaxString); }

void put_header(Writer& w, const HeaderInfo& h, size_t env_budget) {
    const size_t at = w.begin_block();
    w.u16(h.major);
    w.u16(h.minor);
    w.u32(h.header_size);
    w.u32(h.comm_slot_size);
    w.u32(h.max_comms);
    w.u32(h.record_size);
    w.u32(h.ring_capacity);
    w.u32(h.bt_depth);
    w.u64(h.comm_table_offset);
    w.u64(h.ring_offset);
    w.u64(h.bt_offset);
    w.u64(h.file_size);
    w.u64(h.actual_size);
    w.i64(h.pid);
    w.i32(h.global_rank);
    w.i32(h.local_rank);
    w.i32(h.world_size);
    w.i32(h.local_world_size);
    w.str(h.host);
    w.str(h.job_id);
    w.u64(h.start_mono_ns);
    w.u64(h.start_real_ns);
    w.u64(h.boot_id_hash);
    w.i32(h.nccl_version);
    w.i32(h.cuda_driver_version);
    w.u64(h.heartbeat_mono_ns);
    w.u32(h.process_state);
    w.u32(h.num_comms);
    w.u64(h.write_ticket);
    w.u64(h.dump_request);
    w.u64(h.dumps_written);
    w.u64(h.reports_written);
    // The environment last: it is the one part that can be big, so it is cut to what fits the payload limit.
    size_t n = 0, bytes = 0;
    while (n < h.env.size() && n < kMaxEnv && bytes + encoded_size(h.env[n]) <= env_budget)
        bytes += encoded_size(h.env[n++]);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) w.str(h.env[i]);
    w.end_block(at);
}

void put_sig(Writer& w, const SigInfo& s) {
    const size_t at = w.begin_block();
    w.u64(s.seq);
    w.u64(s.count);
    w.u64(s.t_issue_ns);
    w.u8(s.op);
    w.u8(s.dtype);
    w.u8(s.flags);
    w.i32(s.redop);
    w.i32(s.root);
    w.u32(s.tid);
    w.u64(s.stream);
    w.end_block(at);
}

void put_comm(Writer& w, const CommInfo& c) {
    const size_t at = w.begin_block();
    w.u32(c.slot);
    w.u32(c.state);
    w.u32(c.stall_flags);
    w.i32(c.rank);
    w.i32(c.nranks);
    w.i32(c.cuda_dev);
    w.i32(c.blocking);
    w.u64(c.comm_id);
    w.u64(c.parent_id);
    w.i32(c.split_color);
    w.i32(c.split_key);
    w.u64(c.comm_ptr);
    w.str(c.pci_bus_id);
    w.str(c.name);
    w.u64(c.t_init_start_ns);
    w.u64(c.t_init_done_ns);
    w.u64(c.coll_issued);
    w.u64(c.coll_returned);
    w.u64(c.coll_reached);
    w.u64(c.coll_completed);
    w.u64(c.ops_issued);
    w.u64(c.ops_completed);
    w.u64(c.t_last_issue_ns);
    w.u64(c.t_last_progress_ns);
    w.u64(c.p2p_sends);
    w.u64(c.p2p_recvs);
    w.i32(c.async_error);
    w.u32(c.gpu_tracking);
    w.u64(c.stall_since_ns);
    w.u64(c.untracked_ops);
    // The most recent signatures (recent is ordered by seq).
    const size_t n = std::min<size_t>(c.recent.size(), kMaxDigestSigs);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = c.recent.size() - n; i < c.recent.size(); ++i) put_sig(w, c.recent[i]);
    w.end_block(at);
}

// ---- Decoding ----

// Reads fields from [p, p+n). The first failure sticks: later reads return zeros, ok() is false and error() names
// the first field that did not fit.
class Reader {
public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}

    uint8_t u8(const char* what) { return static_cast<uint8_t>(le(1, what)); }
    uint16_t u16(const char* what) { return static_cast<uint16_t>(le(2, what)); }
    uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
    uint64_t u64(const char* what) { return le(8, what); }
    int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
    int64_t i64(const char* what) { return static_cast<int64_t>(u64(what)); }
    std::string str(const char* what) {
        const uint32_t len = u32(what);
        if (!ok_) return {};
        if (len > kMaxString) return fail(what, "string of " + std::to_string(len) + " bytes exceeds the limit"), "";
        if (len > n_ - pos_) return fail(what, "string runs past the end"), "";
        std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
        pos_ += len;
        return s;
    }
    // A count of items that each take at least min_item_bytes: checked against `limit` and the bytes left, so a
    // hostile count cannot make the caller allocate.
    uint32_t count(const char* what, uint32_t limit, size_t min_item_bytes) {
        const uint32_t c = u32(what);
        if (!ok_) return 0;
        if (c > limit) return fail(what, std::to_string(c) + " exceeds the limit of " + std::to_string(limit)), 0;
        if (static_cast<uint64_t>(c) * min_item_bytes > n_ - pos_) return fail(what, "count runs past the end"), 0;
        return c;
    }
    // A nested block: a Reader over its bytes; this reader moves past it.
    Reader block(const char* what) {
        const uint32_t len = u32(what);
        if (!ok_) return Reader(nullptr, 0, false);
        if (len > n_ - pos_) return fail(what, "block runs past the end"), Reader(nullptr, 0, false);
        Reader r(p_ + pos_, len);
        r.ctx_ = what;
        pos_ += len;
        return r;
    }
    // Propagates a nested reader's failure.
    bool absorb(const Reader& inner) {
        if (!inner.ok_ && ok_) {
            ok_ = false;
            error_ = inner.error_.empty() ? std::string(inner.ctx_) + ": truncated" : inner.error_;
        }
        return ok_;
    }
    bool ok() const { return ok_; }
    bool finish(std::string* err) const {
        if (!ok_ && err) *err = error_;
        return ok_;
    }

private:
    Reader(const uint8_t* p, size_t n, bool ok) : p_(p), n_(n), ok_(ok) {}

    uint64_t le(int bytes, const char* what) {
        if (!ok_) return 0;
        if (static_cast<size_t>(bytes) > n_ - pos_) return fail(what, "truncated"), 0;
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
        pos_ += bytes;
        return v;
    }
    void fail(const char* what, const std::string& why) {
        if (!ok_) return;
        ok_ = false;
        error_ = (ctx_ ? std::string(ctx_) + "." : std::string()) + what + ": " + why;
    }

    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    bool ok_ = true;
    const char* ctx_ = nullptr;
    std::string error_;
};

// Smallest encodings, for count checks.
constexpr size_t kMinBlock = 4;
constexpr size_t kMinString = 4;

void get_header(Reader& outer, HeaderInfo& h) {
    Reader r = outer.block("header");
    if (!outer.ok()) return;
    h.major = r.u16("major");
    h.minor = r.u16("minor");
    h.header_size = r.u32("header_size");
    h.comm_slot_size = r.u32("comm_slot_size");
    h.max_comms = r.u32("max_comms");
    h.record_size = r.u32("record_size");
    h.ring_capacity = r.u32("ring_capacity");
    h.bt_depth = r.u32("bt_depth");
    h.comm_table_offset = r.u64("comm_table_offset");
    h.ring_offset = r.u64("ring_offset");
    h.bt_offset = r.u64("bt_offset");
    h.file_size = r.u64("file_size");
    h.actual_size = r.u64("actual_size");
    h.pid = r.i64("pid");
    h.global_rank = r.i32("global_rank");
    h.local_rank = r.i32("local_rank");
    h.world_size = r.i32("world_size");
    h.local_world_size = r.i32("local_world_size");
    h.host = r.str("host");
    h.job_id = r.str("job_id");
    h.start_mono_ns = r.u64("start_mono_ns");
    h.start_real_ns = r.u64("start_real_ns");
    h.boot_id_hash = r.u64("boot_id_hash");
    h.nccl_version = r.i32("nccl_version");
    h.cuda_driver_version = r.i32("cuda_driver_version");
    h.heartbeat_mono_ns = r.u64("heartbeat_mono_ns");
    h.process_state = r.u32("process_state");
    h.num_comms = r.u32("num_comms");
    h.write_ticket = r.u64("write_ticket");
    h.dump_request = r.u64("dump_request");
    h.dumps_written = r.u64("dumps_written");
    h.reports_written = r.u64("reports_written");
    const uint32_t n = r.count("env count", kMaxEnv, kMinString);
    h.env.clear();
    h.env.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); ++i) h.env.push_back(r.str("env entry"));
    outer.absorb(r);
}

void get_sig(Reader& outer, SigInfo& s) {
    Reader r = outer.block("signature");
    if (!outer.ok()) return;
    s.seq = r.u64("seq");
    s.count = r.u64("count");
    s.t_issue_ns = r.u64("t_issue_ns");
    s.op = r.u8("op");
    s.dtype = r.u8("dtype");
    s.flags = r.u8("flags");
    s.redop = r.i32("redop");
    s.root = r.i32("root");
    s.tid = r.u32("tid");
    s.stream = r.u64("stream");
    outer.absorb(r);
}

void get_comm(Reader& outer, CommInfo& c) {
    Reader r = outer.block("comm");
    if (!outer.ok()) return;
    c.slot = r.u32("slot");
    c.state = r.u32("state");
    c.stall_flags = r.u32("stall_flags");
    c.rank = r.i32("rank");
    c.nranks = r.i32("nranks");
    c.cuda_dev = r.i32("cuda_dev");
    c.blocking = r.i32("blocking");
    c.comm_id = r.u64("comm_id");
    c.parent_id = r.u64("parent_id");
    c.split_color = r.i32("split_color");
    c.split_key = r.i32("split_key");
    c.comm_ptr = r.u64("comm_ptr");
    c.pci_bus_id = r.str("pci_bus_id");
    c.name = r.str("name");
    c.t_init_start_ns = r.u64("t_init_start_ns");
    c.t_init_done_ns = r.u64("t_init_done_ns");
    c.coll_issued = r.u64("coll_issued");
    c.coll_returned = r.u64("coll_returned");
    c.coll_reached = r.u64("coll_reached");
    c.coll_completed = r.u64("coll_completed");
    c.ops_issued = r.u64("ops_issued");
    c.ops_completed = r.u64("ops_completed");
    c.t_last_issue_ns = r.u64("t_last_issue_ns");
    c.t_last_progress_ns = r.u64("t_last_progress_ns");
    c.p2p_sends = r.u64("p2p_sends");
    c.p2p_recvs = r.u64("p2p_recvs");
    c.async_error = r.i32("async_error");
    c.gpu_tracking = r.u32("gpu_tracking");
    c.stall_since_ns = r.u64("stall_since_ns");
    c.untracked_ops = r.u64("untracked_ops");
    const uint32_t n = r.count("signature count", kMaxDigestSigs, kMinBlock);
    c.recent.assign(n, SigInfo{});
    for (uint32_t i = 0; i < n && r.ok(); ++i) get_sig(r, c.recent[i]);
    outer.absorb(r);
}

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
    put_header(w, m.header, kMaxPayload > fixed ? kMaxPayload - fixed : 0);
    w.str(m.file);
    finish_frame(w, at);
}

void encode(const Digest& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::Digest);
    w.u64(m.sent_mono_ns);
    w.u32(m.process_state);
    // At most kMaxComms comms of at most kMaxDigestSigs signatures with clamped strings: well under kMaxPayload.
    const size_t n = std::min<size_t>(m.comms.size(), kMaxComms);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) put_comm(w, m.comms[i]);
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
    finish_frame(w, at);
}

void encode(const DumpRequest& m, std::vector<uint8_t>& out) {
    Writer w(out);
    const size_t at = begin_frame(w, FrameType::DumpRequest);
    w.u64(m.request_id);
    w.str(m.reason);
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
        if (v.length > kMaxPayload)
            return fail("frame payload of " + std::to_string(v.length) + " bytes exceeds the limit of " +
                        std::to_string(kMaxPayload));
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
        get_header(r, v.header);
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
    });
}

bool decode(const uint8_t* p, size_t n, KeepAlive& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, KeepAlive& v) { v.sent_mono_ns = r.u64("sent_mono_ns"); });
}

bool decode(const uint8_t* p, size_t n, Reject& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, Reject& v) { v.reason = r.str("reason"); });
}

bool decode(const uint8_t* p, size_t n, DumpRequest& m, std::string* err) noexcept {
    return decode_with(p, n, m, err, [](Reader& r, DumpRequest& v) {
        v.request_id = r.u64("request_id");
        v.reason = r.str("reason");
    });
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

// The live protocol's byte codec (read/wire.h): little-endian integers and length-prefixed strings and blocks, both
// ways. Internal to lib/read/wire*.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ncclwatch/wire.h"
#include "read/wire.h"  // PyStacksBlock; read/rank_file.h: HeaderInfo, CommInfo, SigInfo

namespace ncw::wire {

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
    void str(const std::string& s, size_t limit = kMaxString) {
        const size_t n = std::min<size_t>(s.size(), limit);
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
    std::string str(const char* what, uint32_t limit = kMaxString) {
        const uint32_t len = u32(what);
        if (!ok_) return {};
        if (len > limit) return fail(what, "string of " + std::to_string(len) + " bytes exceeds the limit"), "";
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
    // Nothing left: a block of an older minor ends before the fields a newer one appended.
    bool at_end() const { return !ok_ || pos_ >= n_; }
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

// Bytes a string takes once encoded (clamped like Writer::str).
inline size_t encoded_size(const std::string& s) { return 4 + std::min<size_t>(s.size(), kMaxString); }

// The nested records, generated from include/ncclwatch/format_fields.h (wire_fields.cpp). put_header writes the
// environment last, cut to env_budget bytes, then a Hello's flags (protocol 1.15, kHelloResumed).
void put_header(Writer& w, const HeaderInfo& h, size_t env_budget, uint32_t hello_flags = 0);
void put_sig(Writer& w, const SigInfo& s);
// with_earlier: protocol 1.12's earlier signatures too (else their count alone, 0: the block as 1.11 bounded it).
void put_comm(Writer& w, const CommInfo& c, bool with_earlier = true);
void get_header(Reader& outer, HeaderInfo& h, uint32_t* hello_flags = nullptr);
void get_sig(Reader& outer, SigInfo& s);
void get_comm(Reader& outer, CommInfo& c);
// 1.6: a State's header live fields.
void put_live(Writer& w, const HeaderInfo& h);
void get_live(Reader& outer, HeaderInfo& h);
// 1.4: a Digest's Python stacks block (wire_py_stacks.cpp).
void put_py_stacks(Writer& w, const PyStacksBlock& b);
void get_py_stacks(Reader& outer, PyStacksBlock& b);

}  // namespace ncw::wire

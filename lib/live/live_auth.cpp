// SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the token proof of live_auth.h.
#include "live/live_auth.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>

namespace ncw::live {

namespace {

constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// Incremental SHA-256.
class Sha256 {
public:
    void update(const uint8_t* p, size_t n) noexcept {
        total_ += n;
        while (n) {
            const size_t take = std::min(n, sizeof block_ - used_);
            std::memcpy(block_ + used_, p, take);
            used_ += take;
            p += take;
            n -= take;
            if (used_ == sizeof block_) {
                compress();
                used_ = 0;
            }
        }
    }
    Digest32 finish() noexcept {
        const uint64_t bits = total_ * 8;
        const uint8_t one = 0x80, zero = 0;
        update(&one, 1);
        while (used_ != 56) update(&zero, 1);
        uint8_t len[8];
        for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
        update(len, 8);
        Digest32 out;
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 4; ++j) out[size_t(4 * i + j)] = uint8_t(h_[i] >> (24 - 8 * j));
        return out;
    }

private:
    void compress() noexcept {
        uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = uint32_t(block_[4 * i]) << 24 | uint32_t(block_[4 * i + 1]) << 16 |
                   uint32_t(block_[4 * i + 2]) << 8 | uint32_t(block_[4 * i + 3]);
        for (int i = 16; i < 64; ++i) {
            const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
        for (int i = 0; i < 64; ++i) {
            const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
            const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
    }

    uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t block_[64] = {};
    size_t used_ = 0;
    uint64_t total_ = 0;
};

// HMAC over the concatenation of `parts`.
struct Part {
    const uint8_t* p;
    size_t n;
};
Digest32 hmac(const std::string& key, std::initializer_list<Part> parts) noexcept {
    uint8_t k[64] = {};
    if (key.size() > sizeof k) {
        const Digest32 kh = sha256(reinterpret_cast<const uint8_t*>(key.data()), key.size());
        std::memcpy(k, kh.data(), kh.size());
    } else {
        std::memcpy(k, key.data(), key.size());
    }
    uint8_t pad[64];
    for (size_t i = 0; i < 64; ++i) pad[i] = k[i] ^ 0x36;
    Sha256 inner;
    inner.update(pad, 64);
    for (const Part& part : parts) inner.update(part.p, part.n);
    const Digest32 ih = inner.finish();
    for (size_t i = 0; i < 64; ++i) pad[i] = k[i] ^ 0x5c;
    Sha256 outer;
    outer.update(pad, 64);
    outer.update(ih.data(), ih.size());
    return outer.finish();
}

}  // namespace

Digest32 sha256(const uint8_t* p, size_t n) noexcept {
    Sha256 s;
    s.update(p, n);
    return s.finish();
}

Digest32 hmac_sha256(const std::string& key, const uint8_t* p, size_t n) noexcept { return hmac(key, {{p, n}}); }

Digest32 token_proof(const std::string& token, const std::string& nonce, const uint8_t* hello_payload,
                     size_t hello_len) noexcept {
    return hmac(token, {{reinterpret_cast<const uint8_t*>(kProofLabel), sizeof kProofLabel},
                        {reinterpret_cast<const uint8_t*>(nonce.data()), nonce.size()},
                        {hello_payload, hello_len}});
}

bool equal_ct(const uint8_t* expected, size_t n, const std::string& got) noexcept {
    unsigned diff = n != got.size();
    for (size_t i = 0; i < n; ++i) diff |= expected[i] ^ uint8_t(i < got.size() ? got[i] : 0);
    return diff == 0;
}

bool fresh_nonce(std::string& out) noexcept {
    try {
        out.assign(kNonceBytes, '\0');
    } catch (...) {
        return false;
    }
    size_t got = 0;
    while (got < kNonceBytes) {
        const ssize_t r = getrandom(out.data() + got, kNonceBytes - got, 0);
        if (r > 0) {
            got += size_t(r);
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        break;
    }
    if (got == kNonceBytes) return true;
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    while (got < kNonceBytes) {
        const ssize_t r = read(fd, out.data() + got, kNonceBytes - got);
        if (r > 0)
            got += size_t(r);
        else if (!(r < 0 && errno == EINTR))
            break;
    }
    close(fd);
    return got == kNonceBytes;
}

}  // namespace ncw::live

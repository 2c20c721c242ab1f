// The live protocol's token proof (wire 1.2): a rank proves it holds NCCLWATCH_TOKEN without sending it.
//
//   rank -> collector   Hello (its identity; the token field is empty)
//   collector -> rank   Challenge (a fresh 32-byte nonce), only when the collector requires a token
//   rank -> collector   Proof = HMAC-SHA256(token, kProofLabel || nonce || the Hello's payload bytes)
//   collector -> rank   HelloAck, or Reject "token refused"
//
// The proof binds the nonce (no replay) and every Hello field (no identity swapped under a captured proof). SHA-256
// (FIPS 180-4) and HMAC (RFC 2104) are our own, so libncclwatch.so gains no DT_NEEDED; the unit test checks them
// against the FIPS 180-4 and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ncw::live {

using Digest32 = std::array<uint8_t, 32>;

inline constexpr size_t kNonceBytes = 32;
inline constexpr char kProofLabel[] = "ncclwatch live 1.2 token proof";

Digest32 sha256(const uint8_t* p, size_t n) noexcept;
Digest32 hmac_sha256(const std::string& key, const uint8_t* p, size_t n) noexcept;

// The rank's answer to a Challenge (and what the collector expects).
Digest32 token_proof(const std::string& token, const std::string& nonce, const uint8_t* hello_payload,
                     size_t hello_len) noexcept;

// Constant time in `expected`'s length; a size mismatch is a mismatch.
bool equal_ct(const uint8_t* expected, size_t n, const std::string& got) noexcept;

// kNonceBytes from the kernel's generator (getrandom, else /dev/urandom); false when neither answered.
bool fresh_nonce(std::string& out) noexcept;

}  // namespace ncw::live

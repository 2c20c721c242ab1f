// SHA-256 against FIPS 180-4's examples, HMAC-SHA256 against RFC 4231's test cases, and the token proof's binding.
#include <catch2/catch.hpp>
#include <string>

#include "live/live_auth.h"

namespace {

using namespace ncw::live;

std::string hex(const Digest32& d) {
    static const char* k = "0123456789abcdef";
    std::string s;
    for (uint8_t b : d) s += k[b >> 4], s += k[b & 15];
    return s;
}
const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }
std::string sha(const std::string& s) { return hex(sha256(bytes(s), s.size())); }
std::string mac(const std::string& key, const std::string& s) { return hex(hmac_sha256(key, bytes(s), s.size())); }

}  // namespace

TEST_CASE("SHA-256 gives the FIPS 180-4 digests") {
    CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(sha(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    // 55, 56 and 64 bytes: the padding's edges.
    CHECK(sha(std::string(55, 'a')) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    CHECK(sha(std::string(56, 'a')) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    CHECK(sha(std::string(64, 'a')) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST_CASE("HMAC-SHA256 gives the RFC 4231 results") {
    CHECK(mac(std::string(20, '\x0b'), "Hi There") ==
          "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    CHECK(mac("Jefe", "what do ya want for nothing?") ==
          "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK(mac(std::string(20, '\xaa'), std::string(50, '\xdd')) ==
          "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    std::string key4;
    for (int i = 1; i <= 25; ++i) key4 += char(i);
    CHECK(mac(key4, std::string(50, '\xcd')) == "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    // A key longer than the block is hashed first.
    CHECK(mac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
          "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    CHECK(mac(std::string(131, '\xaa'),
              "This is a test using a larger than block-size key and a larger than block-size data. The key needs "
              "to be hashed before being used by the HMAC algorithm.") ==
          "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("the token proof binds the token, the nonce and every byte of the Hello") {
    std::string n1, n2;
    REQUIRE(fresh_nonce(n1));
    REQUIRE(fresh_nonce(n2));
    CHECK(n1.size() == kNonceBytes);
    CHECK(n1 != n2);
    const std::string hello = "hello payload: job j, rank 1, pid 42";
    const Digest32 p = token_proof("tok", n1, bytes(hello), hello.size());
    const std::string got(p.begin(), p.end());
    CHECK(equal_ct(p.data(), p.size(), got));
    CHECK(!equal_ct(p.data(), p.size(), got.substr(0, 31)));
    CHECK(!equal_ct(p.data(), p.size(), ""));
    std::string flipped = got;
    flipped[31] ^= 1;
    CHECK(!equal_ct(p.data(), p.size(), flipped));
    CHECK(token_proof("tok2", n1, bytes(hello), hello.size()) != p);
    CHECK(token_proof("tok", n2, bytes(hello), hello.size()) != p);
    std::string other = hello;
    other.back() = '3';
    CHECK(token_proof("tok", n1, bytes(other), other.size()) != p);
}

// Known answers from the standards, not from the code: SHA-256 from FIPS 180-2 appendix B,
// HMAC-SHA256 from RFC 4231 section 4.
#include "ibprobe/crypto.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::crypto {
namespace {

std::string hex(const Sha256& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const auto byte : digest) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 0xf];
  }
  return out;
}

std::vector<std::uint8_t> bytes(std::string_view text) {
  return {text.begin(), text.end()};
}

TEST(Crypto, Sha256KnownAnswers) {
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Crypto, HmacSha256KnownAnswers) {
  // Test case 1: a 20-byte key of 0x0b.
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), bytes("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block.
  EXPECT_EQ(hex(hmac_sha256("Jefe", bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'),
                            bytes("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Crypto, EqualInConstantTimeComparesEveryByte) {
  const std::string a = "0123456789abcdef";
  std::string b = a;
  EXPECT_TRUE(equal_in_constant_time(a.data(), b.data(), a.size()));
  b.back() = 'g';
  EXPECT_FALSE(equal_in_constant_time(a.data(), b.data(), a.size()));
  b = a;
  b.front() = 'x';
  EXPECT_FALSE(equal_in_constant_time(a.data(), b.data(), a.size()));
  EXPECT_TRUE(equal_in_constant_time(a.data(), b.data(), 0));
}

TEST(Crypto, CleanseZeroesTheBytes) {
  std::string secret = "a secret to forget";
  cleanse(secret.data(), secret.size());
  EXPECT_EQ(secret, std::string(secret.size(), '\0'));
}

}  // namespace
}  // namespace ibprobe::crypto

#include "payload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

namespace ibprobe::probes::payload {
namespace {

using ::testing::HasSubstr;

std::vector<std::uint8_t> message(std::size_t size, std::uint16_t qp = 3,
                                  std::uint16_t generation = 7, std::uint64_t sequence = 41) {
  std::vector<std::uint8_t> bytes(size, 0xaa);
  fill(bytes, qp, generation, sequence);
  return bytes;
}

TEST(Payload, FilledMessageVerifiesWithItsHeader) {
  for (std::size_t size : {64u, 65u, 100u, 4096u, 65536u}) {
    const auto bytes = message(size, 5, 9, 123456789012ull);
    const auto finding = verify(bytes);
    EXPECT_TRUE(finding.ok()) << size << ": " << finding.describe();
    EXPECT_EQ(finding.header.magic, kMagic);
    EXPECT_EQ(finding.header.qp, 5);
    EXPECT_EQ(finding.header.generation, 9);
    EXPECT_EQ(finding.header.sequence, 123456789012ull);
    EXPECT_EQ(finding.header.length, size);
    EXPECT_EQ(read_trailer(bytes), 123456789012ull);
    EXPECT_EQ(finding.header.checksum, checksum(bytes));
  }
}

TEST(Payload, IsPseudoRandomNotConstant) {
  const auto bytes = message(4096);
  // A payload of one repeated byte would hide shifted or stale blocks.
  const std::set<std::uint8_t> distinct(bytes.begin() + kHeaderBytes, bytes.end() - kTrailerBytes);
  EXPECT_GT(distinct.size(), 200u);
  std::size_t zeros = 0;
  for (std::size_t i = kHeaderBytes; i < bytes.size() - kTrailerBytes; ++i) zeros += bytes[i] == 0;
  EXPECT_LT(zeros, 64u);
}

TEST(Payload, DependsOnQpGenerationAndSequence) {
  const auto base = message(256, 1, 1, 1);
  for (const auto& other : {message(256, 2, 1, 1), message(256, 1, 2, 1), message(256, 1, 1, 2)}) {
    EXPECT_NE(std::memcmp(base.data() + kHeaderBytes, other.data() + kHeaderBytes, 64), 0);
  }
}

TEST(Payload, EverySingleByteFlipIsFoundAtItsOffset) {
  const auto clean = message(200);
  for (std::size_t offset = kHeaderBytes; offset < clean.size() - kTrailerBytes; ++offset) {
    auto bytes = clean;
    bytes[offset] ^= 0x01;
    const auto finding = verify(bytes);
    ASSERT_EQ(finding.kind, Finding::Kind::kCorrupt) << offset;
    EXPECT_EQ(finding.offset, offset);
    EXPECT_EQ(finding.expected, clean[offset]);
    EXPECT_EQ(finding.actual, clean[offset] ^ 0x01);
    EXPECT_EQ(finding.mismatched, 1u);
    EXPECT_THAT(finding.describe(), HasSubstr("offset " + std::to_string(offset)));
  }
}

TEST(Payload, DamagedHeaderFieldsAreCaught) {
  const auto clean = message(128);
  auto bad_magic = clean;
  bad_magic[0] ^= 0xff;
  EXPECT_EQ(verify(bad_magic).kind, Finding::Kind::kBadMagic);

  auto bad_length = clean;
  bad_length[16] ^= 0x01;
  EXPECT_EQ(verify(bad_length).kind, Finding::Kind::kBadLength);

  auto bad_trailer = clean;
  bad_trailer[clean.size() - 1] ^= 0x01;
  EXPECT_EQ(verify(bad_trailer).kind, Finding::Kind::kTornTrailer);

  // A sequence number changed in the header alone: the trailer no longer agrees.
  auto bad_sequence = clean;
  bad_sequence[8] ^= 0x01;
  EXPECT_EQ(verify(bad_sequence).kind, Finding::Kind::kTornTrailer);

  // QP index changed: the payload no longer matches what the header describes.
  auto bad_qp = clean;
  bad_qp[4] ^= 0x01;
  const auto finding = verify(bad_qp);
  EXPECT_EQ(finding.kind, Finding::Kind::kCorrupt);
  EXPECT_THAT(finding.describe(), HasSubstr("not the one its header describes"));

  // The checksum field itself hit: the payload is intact.
  auto bad_checksum = clean;
  bad_checksum[24] ^= 0x01;
  const auto checksum_hit = verify(bad_checksum);
  EXPECT_EQ(checksum_hit.kind, Finding::Kind::kCorrupt);
  EXPECT_THAT(checksum_hit.describe(), HasSubstr("header or checksum field damaged"));
}

TEST(Payload, MessageZeroIsNotCompleteBeforeItsTrailerLands) {
  // A write into a fresh (zeroed) slot: only the first packet, with the header, has landed.
  const auto whole = message(4096, 0, 1, 0);
  std::vector<std::uint8_t> landing(4096, 0);
  std::memcpy(landing.data(), whole.data(), 1024);
  EXPECT_NE(read_trailer(landing), read_header(landing).sequence);
  EXPECT_EQ(verify(landing).kind, Finding::Kind::kTornTrailer);
}

TEST(Payload, TruncatedMessageIsABadLength) {
  const auto clean = message(128);
  EXPECT_EQ(verify(std::span(clean).first(100)).kind, Finding::Kind::kBadLength);
  EXPECT_EQ(verify(std::span(clean).first(16)).kind, Finding::Kind::kBadLength);
}

TEST(Payload, MessagePlacedInTheWrongOrderIsCaught) {
  // Two halves swapped, as a receive filling its scatter pieces out of order would leave them.
  const auto clean = message(256);
  std::vector<std::uint8_t> swapped(clean.begin() + 128, clean.end());
  swapped.insert(swapped.end(), clean.begin(), clean.begin() + 128);
  EXPECT_FALSE(verify(swapped).ok());
}

TEST(Payload, FaultSwitchFlipsOnePayloadByteAfterTheChecksum) {
  for (std::uint64_t sequence : {0ull, 15ull, 31ull, 1000003ull}) {
    const auto clean = message(4096, 0, 1, sequence);
    auto bytes = clean;
    flip_byte_after_checksum(bytes, sequence);
    std::size_t changed = 0, where = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != clean[i]) {
        ++changed;
        where = i;
      }
    }
    ASSERT_EQ(changed, 1u);
    EXPECT_GE(where, kHeaderBytes);
    EXPECT_LT(where, bytes.size() - kTrailerBytes);
    const auto finding = verify(bytes);
    EXPECT_EQ(finding.kind, Finding::Kind::kCorrupt);
    EXPECT_EQ(finding.offset, where);
  }
}

TEST(WorkId, RoundTripsEveryField) {
  const WorkId id{0xbeef, 0x1234, 0xfedcba98};
  EXPECT_EQ(decode_wr_id(encode_wr_id(id)), id);
  const WorkId low{1, 0, 0};
  EXPECT_EQ(decode_wr_id(encode_wr_id(low)), low);
}

TEST(WorkId, BareQpIndexDecodesAsGenerationZero) {
  // Non-validating loops post the QP index alone; its completions must still name the QP.
  const auto id = decode_wr_id(17);
  EXPECT_EQ(id.qp, 17);
  EXPECT_EQ(id.generation, 0);
  EXPECT_EQ(id.sequence, 0u);
}

TEST(WorkId, GenerationsDifferAndAreNeverZero) {
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 70000; ++i) {
    const auto generation = next_generation();
    ASSERT_NE(generation, 0);
    if (i < 1000) seen.insert(generation);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace ibprobe::probes::payload

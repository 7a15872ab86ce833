// The FEC reply decoder against attribute bytes laid out here by hand as the kernel's
// net/ethtool/fec.c writes them (struct nlattr of <linux/netlink.h>; types of
// <linux/ethtool_netlink.h>), with link-mode names as ethtool's netlink/fec.c prints them.
#include "ibprobe/fec_statistics.h"

#include <gtest/gtest.h>
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/netlink.h>

#include <cstring>
#include <initializer_list>

namespace ibprobe::testing {
namespace {

using collectors::FecCounter;
using collectors::FecErrorKind;
using Bytes = std::vector<std::uint8_t>;

// One attribute: length (header included) and type in host byte order, payload, zero padding to
// four bytes.
Bytes attribute(std::uint16_t type, const Bytes& payload) {
  const auto length = static_cast<std::uint16_t>(4 + payload.size());
  Bytes out(4);
  std::memcpy(out.data(), &length, 2);
  std::memcpy(out.data() + 2, &type, 2);
  out.insert(out.end(), payload.begin(), payload.end());
  out.resize((out.size() + 3) / 4 * 4, 0);
  return out;
}

Bytes nest(std::uint16_t type, std::initializer_list<Bytes> members) {
  Bytes payload;
  for (const auto& member : members) payload.insert(payload.end(), member.begin(), member.end());
  return attribute(type | NLA_F_NESTED, payload);
}

template <typename T>
Bytes native(std::initializer_list<T> values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// A reply as the kernel sends it to `ethtool -I --show-fec eth0` on a 4-lane RS-FEC port whose
// driver counts corrected blocks per lane and uncorrectable blocks in total only.
Bytes rs_fec_reply() {
  return concat({
      nest(ETHTOOL_A_FEC_HEADER, {attribute(ETHTOOL_A_HEADER_DEV_INDEX, native<std::uint32_t>({2})),
                                  attribute(ETHTOOL_A_HEADER_DEV_NAME, {'e', 't', 'h', '0', 0})}),
      nest(ETHTOOL_A_FEC_MODES, {attribute(ETHTOOL_A_BITSET_NOMASK, {})}),
      attribute(ETHTOOL_A_FEC_AUTO, {0}),
      attribute(ETHTOOL_A_FEC_ACTIVE, native<std::uint32_t>({ETHTOOL_LINK_MODE_FEC_RS_BIT})),
      nest(ETHTOOL_A_FEC_STATS,
           {attribute(ETHTOOL_A_FEC_STAT_PAD, {}),
            attribute(ETHTOOL_A_FEC_STAT_CORRECTED, native<std::uint64_t>({10, 4, 3, 2, 1})),
            attribute(ETHTOOL_A_FEC_STAT_PAD, {}),
            attribute(ETHTOOL_A_FEC_STAT_UNCORR, native<std::uint64_t>({7})),
            attribute(ETHTOOL_A_FEC_STAT_CORR_BITS, {})}),
  });
}

TEST(FecStatistics, RsFecReplyTotalsAndLanes) {
  const auto decoded = collectors::decode_fec_reply(rs_fec_reply());
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded->active_mode, "RS");
  EXPECT_EQ(decoded->corrected_blocks, (FecCounter{.total = 10, .lanes = {4, 3, 2, 1}}));
  EXPECT_EQ(decoded->uncorrectable_blocks, (FecCounter{.total = 7, .lanes = {}}));
  EXPECT_FALSE(decoded->corrected_bits);  // an empty array: the driver left it unset
}

TEST(FecStatistics, WithoutStatisticsOrActiveMode) {
  const auto decoded = collectors::decode_fec_reply(
      nest(ETHTOOL_A_FEC_HEADER, {attribute(ETHTOOL_A_HEADER_DEV_NAME, {'e', 't', 'h', '0', 0})}));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(*decoded, collectors::FecStatistics{});
  EXPECT_TRUE(collectors::decode_fec_reply({}));
}

TEST(FecStatistics, ActiveModeNamesAsEthtoolPrintsThem) {
  const auto name_of = [](std::uint32_t bit) {
    return collectors::decode_fec_reply(attribute(ETHTOOL_A_FEC_ACTIVE, native({bit})))
        ->active_mode;
  };
  EXPECT_EQ(name_of(ETHTOOL_LINK_MODE_FEC_NONE_BIT), "Off");
  EXPECT_EQ(name_of(ETHTOOL_LINK_MODE_FEC_RS_BIT), "RS");
  EXPECT_EQ(name_of(ETHTOOL_LINK_MODE_FEC_BASER_BIT), "BaseR");
  EXPECT_EQ(name_of(ETHTOOL_LINK_MODE_FEC_LLRS_BIT), "LLRS");
  EXPECT_EQ(name_of(3), "BIT3");
}

// NLA_F_NESTED is a flag the kernel sets, not part of the type: a nest without it reads the same.
// An attribute a later kernel adds is skipped.
TEST(FecStatistics, NestFlagOptionalAndUnknownAttributesSkipped) {
  const auto decoded = collectors::decode_fec_reply(concat({
      attribute(ETHTOOL_A_FEC_MAX + 1, native<std::uint64_t>({1, 2, 3})),
      attribute(ETHTOOL_A_FEC_STATS, concat({attribute(ETHTOOL_A_FEC_STAT_MAX + 1, {1, 2, 3}),
                                             attribute(ETHTOOL_A_FEC_STAT_CORR_BITS,
                                                       native<std::uint64_t>({99, 50, 49}))})),
  }));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded->corrected_bits, (FecCounter{.total = 99, .lanes = {50, 49}}));
}

// A message may end right after the last attribute's payload, without its padding.
TEST(FecStatistics, LastAttributeWithoutPadding) {
  auto bytes = concat({attribute(ETHTOOL_A_FEC_AUTO, {1})});
  bytes.resize(5);
  EXPECT_TRUE(collectors::decode_fec_reply(bytes));
}

FecErrorKind error_of(const Bytes& bytes) {
  const auto decoded = collectors::decode_fec_reply(bytes);
  EXPECT_FALSE(decoded) << "decoded, expected an error";
  return decoded ? FecErrorKind{} : decoded.error().kind;
}

TEST(FecStatistics, MalformedNestsAreErrors) {
  const auto reply = rs_fec_reply();
  {
    auto cut = reply;
    cut.resize(cut.size() - 12);  // the stats nest now claims bytes past the end
    EXPECT_EQ(error_of(cut), FecErrorKind::kMalformedAttribute);
  }
  {
    Bytes trailing = concat({attribute(ETHTOOL_A_FEC_AUTO, {1}), {0, 0}});
    EXPECT_EQ(error_of(trailing), FecErrorKind::kMalformedAttribute);
  }
  {
    Bytes below_header = attribute(ETHTOOL_A_FEC_AUTO, {1});
    below_header[0] = 2;  // nla_len 2: shorter than its own header
    EXPECT_EQ(error_of(below_header), FecErrorKind::kMalformedAttribute);
  }
  {
    // An inner attribute longer than its nest.
    auto inner = attribute(ETHTOOL_A_FEC_STAT_UNCORR, native<std::uint64_t>({1}));
    inner[0] = 40;
    EXPECT_EQ(error_of(attribute(ETHTOOL_A_FEC_STATS, inner)), FecErrorKind::kMalformedAttribute);
  }
  {
    const auto twelve =
        attribute(ETHTOOL_A_FEC_STATS, attribute(ETHTOOL_A_FEC_STAT_CORRECTED, Bytes(12, 1)));
    const auto decoded = collectors::decode_fec_reply(twelve);
    ASSERT_FALSE(decoded);
    EXPECT_EQ(decoded.error().kind, FecErrorKind::kBadPayloadLength);
    EXPECT_NE(decoded.error().message.find("ETHTOOL_A_FEC_STAT_CORRECTED"), std::string::npos)
        << decoded.error().message;
  }
  EXPECT_EQ(error_of(attribute(ETHTOOL_A_FEC_ACTIVE, {1, 0})), FecErrorKind::kBadPayloadLength);
}

TEST(FecStatistics, ErrorKindsHaveReasonNames) {
  EXPECT_EQ(collectors::to_string(FecErrorKind::kMalformedAttribute), "malformed_attribute");
  EXPECT_EQ(collectors::to_string(FecErrorKind::kBadPayloadLength), "bad_payload_length");
}

}  // namespace
}  // namespace ibprobe::testing

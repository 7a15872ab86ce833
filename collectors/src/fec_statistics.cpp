#include "ibprobe/fec_statistics.h"

#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/netlink.h>

#include <cstring>
#include <utility>

#include "ibprobe/enum_names.h"
#include "netlink_attributes.h"

namespace ibprobe::collectors {
namespace {

constexpr EnumNames<FecErrorKind, 2> kErrorNames{{
    {FecErrorKind::kMalformedAttribute, "malformed_attribute"},
    {FecErrorKind::kBadPayloadLength, "bad_payload_length"},
}};

std::unexpected<FecError> failure(FecErrorKind kind, std::string message) {
  return std::unexpected(FecError{kind, std::move(message)});
}

using netlink::Attribute;

std::string where(const Attribute& attribute, std::string_view name) {
  return std::string(name) + " at offset " + std::to_string(attribute.offset) + " (" +
         std::to_string(attribute.payload.size()) + "-byte payload)";
}

std::expected<std::vector<Attribute>, FecError> attributes_of(std::span<const std::uint8_t> bytes,
                                                              std::size_t base) {
  auto attributes = netlink::attributes_of(bytes, base);
  if (!attributes) {
    return failure(
        FecErrorKind::kMalformedAttribute,
        "offset " + std::to_string(attributes.error().offset) + ": " + attributes.error().reason);
  }
  return std::move(*attributes);
}

// A u64 array: element 0 the total, the rest per lane (the kernel's fec_stats_recalc). An empty
// array is a statistic the driver left unset.
std::expected<std::optional<FecCounter>, FecError> counter_of(const Attribute& attribute,
                                                              std::string_view name) {
  if (attribute.payload.size() % sizeof(std::uint64_t) != 0) {
    return failure(FecErrorKind::kBadPayloadLength,
                   where(attribute, name) + ": not a whole number of u64");
  }
  if (attribute.payload.empty()) return std::nullopt;
  std::vector<std::uint64_t> values(attribute.payload.size() / sizeof(std::uint64_t));
  std::memcpy(values.data(), attribute.payload.data(), attribute.payload.size());
  return FecCounter{.total = values.front(), .lanes = {values.begin() + 1, values.end()}};
}

std::expected<void, FecError> decode_statistics(const Attribute& nest, FecStatistics& out) {
  const auto statistics = attributes_of(nest.payload, nest.offset + NLA_HDRLEN);
  if (!statistics) return std::unexpected(statistics.error());
  for (const auto& attribute : *statistics) {
    std::optional<FecCounter>* target = nullptr;
    std::string_view name;
    switch (attribute.type) {
      case ETHTOOL_A_FEC_STAT_CORRECTED:
        target = &out.corrected_blocks;
        name = "ETHTOOL_A_FEC_STAT_CORRECTED";
        break;
      case ETHTOOL_A_FEC_STAT_UNCORR:
        target = &out.uncorrectable_blocks;
        name = "ETHTOOL_A_FEC_STAT_UNCORR";
        break;
      case ETHTOOL_A_FEC_STAT_CORR_BITS:
        target = &out.corrected_bits;
        name = "ETHTOOL_A_FEC_STAT_CORR_BITS";
        break;
      default:  // ETHTOOL_A_FEC_STAT_PAD aligns the next u64 array; later kernels add more
        continue;
    }
    auto counter = counter_of(attribute, name);
    if (!counter) return std::unexpected(counter.error());
    *target = std::move(*counter);
  }
  return {};
}

// ethtool's names for the FEC link modes (netlink/fec.c fec_mode_walk renames the kernel's
// "None" and "BASER").
std::string fec_mode_name(std::uint32_t link_mode_bit) {
  switch (link_mode_bit) {
    case ETHTOOL_LINK_MODE_FEC_NONE_BIT:
      return "Off";
    case ETHTOOL_LINK_MODE_FEC_RS_BIT:
      return "RS";
    case ETHTOOL_LINK_MODE_FEC_BASER_BIT:
      return "BaseR";
    case ETHTOOL_LINK_MODE_FEC_LLRS_BIT:
      return "LLRS";
    default:
      return "BIT" + std::to_string(link_mode_bit);
  }
}

}  // namespace

std::string_view to_string(FecErrorKind kind) {
  return name_of(kErrorNames, kind);
}

std::expected<FecStatistics, FecError> decode_fec_reply(std::span<const std::uint8_t> attributes) {
  const auto top = attributes_of(attributes, 0);
  if (!top) return std::unexpected(top.error());
  FecStatistics out;
  for (const auto& attribute : *top) {
    switch (attribute.type) {
      case ETHTOOL_A_FEC_ACTIVE: {
        std::uint32_t bit;
        if (attribute.payload.size() != sizeof bit) {
          return failure(FecErrorKind::kBadPayloadLength,
                         where(attribute, "ETHTOOL_A_FEC_ACTIVE") + ": not a u32");
        }
        std::memcpy(&bit, attribute.payload.data(), sizeof bit);
        out.active_mode = fec_mode_name(bit);
        break;
      }
      case ETHTOOL_A_FEC_STATS:
        if (auto decoded = decode_statistics(attribute, out); !decoded) {
          return std::unexpected(decoded.error());
        }
        break;
      default:  // the header nest, the configured modes, auto
        break;
    }
  }
  return out;
}

}  // namespace ibprobe::collectors

#include "pma_mad.h"

#include <cstdio>

#include "ibprobe/enum_names.h"

namespace ibprobe::fabric::mad {
namespace {

// Common header byte offsets.
constexpr std::size_t kStatusOffset = 4;
constexpr std::size_t kTransactionIdOffset = 8;
constexpr std::size_t kAttributeIdOffset = 16;
constexpr std::size_t kAttributeModifierOffset = 20;
constexpr std::size_t kHeaderSize = 24;

constexpr CounterField kPortCounters[] = {
    {"symbol_error", 32, 16},
    {"link_error_recovery", 48, 8},
    {"link_downed", 56, 8},
    {"port_rcv_errors", 64, 16},
    {"port_rcv_remote_physical_errors", 80, 16},
    {"port_rcv_switch_relay_errors", 96, 16},
    {"port_xmit_discards", 112, 16},
    {"port_xmit_constraint_errors", 128, 8},
    {"port_rcv_constraint_errors", 136, 8},
    {"local_link_integrity_errors", 152, 4},
    {"excessive_buffer_overrun_errors", 156, 4},
    {"VL15_dropped", 176, 16},
    {"port_xmit_data", 192, 32},
    {"port_rcv_data", 224, 32},
    {"port_xmit_packets", 256, 32},
    {"port_rcv_packets", 288, 32},
    {"port_xmit_wait", 320, 32},
};

constexpr CounterField kPortCountersExtended[] = {
    {"port_xmit_data", 64, 64},          {"port_rcv_data", 128, 64},
    {"port_xmit_packets", 192, 64},      {"port_rcv_packets", 256, 64},
    {"unicast_xmit_packets", 320, 64},   {"unicast_rcv_packets", 384, 64},
    {"multicast_xmit_packets", 448, 64}, {"multicast_rcv_packets", 512, 64},
};

void put_be(Mad& mad, std::size_t offset, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, value >>= 8) {
    mad[offset + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(value);
  }
}

std::uint64_t get_be(std::span<const std::uint8_t> bytes, std::size_t offset, int count) {
  std::uint64_t value = 0;
  for (int i = 0; i < count; ++i) value = value << 8 | bytes[offset + static_cast<std::size_t>(i)];
  return value;
}

constexpr EnumNames<Attribute, 4> kAttributeNames{
    {{Attribute::kClassPortInfo, "ClassPortInfo"},
     {Attribute::kNodeInfo, "NodeInfo"},
     {Attribute::kPortCounters, "PortCounters"},
     {Attribute::kPortCountersExtended, "PortCountersExtended"}}};

}  // namespace

std::string_view to_string(Attribute attribute) {
  return name_of(kAttributeNames, attribute, "unknown attribute");
}

Mad encode_get(const Request& request) {
  Mad mad{};
  mad[0] = kBaseVersion;
  mad[1] = static_cast<std::uint8_t>(request.mgmt_class);
  mad[2] = kClassVersion;
  mad[3] = static_cast<std::uint8_t>(Method::kGet);
  put_be(mad, kTransactionIdOffset, request.transaction_id, 8);
  put_be(mad, kAttributeIdOffset, static_cast<std::uint16_t>(request.attribute), 2);
  if (request.attribute == Attribute::kPortCounters ||
      request.attribute == Attribute::kPortCountersExtended) {
    mad[kDataOffset + 1] = request.port_select;
  }
  return mad;
}

std::optional<Header> decode_header(std::span<const std::uint8_t> mad) {
  if (mad.size() < kHeaderSize) return std::nullopt;
  return Header{
      .base_version = mad[0],
      .mgmt_class = static_cast<MgmtClass>(mad[1]),
      .class_version = mad[2],
      .method = static_cast<Method>(mad[3]),
      .status = static_cast<std::uint16_t>(get_be(mad, kStatusOffset, 2)),
      .transaction_id = get_be(mad, kTransactionIdOffset, 8),
      .attribute = static_cast<Attribute>(get_be(mad, kAttributeIdOffset, 2)),
      .attribute_modifier = static_cast<std::uint32_t>(get_be(mad, kAttributeModifierOffset, 4)),
  };
}

std::string describe_status(std::uint16_t status) {
  // Bits 0-4 are common to every class (IBA 13.4.7); bits 8-15 are class specific.
  std::string meaning;
  auto add = [&](std::string_view what) {
    if (!meaning.empty()) meaning += ", ";
    meaning += what;
  };
  if (status & 0x0001) add("busy");
  if (status & 0x0002) add("redirect required");
  switch ((status >> 2) & 0x7) {
    case 0:
      break;
    case 1:
      add("bad base or class version");
      break;
    case 2:
      add("method not supported");
      break;
    case 3:
      add("method/attribute combination not supported");
      break;
    case 7:
      add("invalid attribute field or modifier");
      break;
    default:
      add("reserved invalid-field code");
      break;
  }
  if (status & 0xFF00) add("class-specific bits set");
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%04x", status);
  return meaning.empty() ? std::string(hex) : std::string(hex) + " (" + meaning + ")";
}

std::span<const std::uint8_t> data_of(std::span<const std::uint8_t> mad) {
  if (mad.size() < kMadSize) return {};
  return mad.subspan(kDataOffset, kMadSize - kDataOffset);
}

std::uint64_t read_bits(std::span<const std::uint8_t> data, int bit_offset, int width) {
  // A field spans at most 9 bytes (64 bits not aligned to a byte); gather them, then shift.
  const auto first = static_cast<std::size_t>(bit_offset / 8);
  const auto last = static_cast<std::size_t>((bit_offset + width - 1) / 8);
  unsigned __int128 bits = 0;
  for (std::size_t i = first; i <= last; ++i) bits = bits << 8 | data[i];
  const int trailing = static_cast<int>((last + 1) * 8) - (bit_offset + width);
  bits >>= trailing;
  const unsigned __int128 mask = (static_cast<unsigned __int128>(1) << width) - 1;
  return static_cast<std::uint64_t>(bits & mask);
}

ClassPortInfo decode_class_port_info(std::span<const std::uint8_t> data) {
  return ClassPortInfo{
      .base_version = static_cast<std::uint8_t>(read_bits(data, 0, 8)),
      .class_version = static_cast<std::uint8_t>(read_bits(data, 8, 8)),
      .capability_mask = static_cast<std::uint16_t>(read_bits(data, 16, 16)),
      .capability_mask2 = static_cast<std::uint32_t>(read_bits(data, 32, 27)),
      .resp_time_value = static_cast<std::uint8_t>(read_bits(data, 59, 5)),
  };
}

NodeInfo decode_node_info(std::span<const std::uint8_t> data) {
  return NodeInfo{
      .num_ports = static_cast<std::uint8_t>(read_bits(data, 24, 8)),
      .node_guid = read_bits(data, 96, 64),
  };
}

std::span<const CounterField> port_counters_fields() {
  return kPortCounters;
}

std::span<const CounterField> port_counters_extended_fields() {
  return kPortCountersExtended;
}

std::uint8_t port_select_of(std::span<const std::uint8_t> data) {
  return static_cast<std::uint8_t>(read_bits(data, 8, 8));
}

std::vector<CounterValue> decode_counters(std::span<const std::uint8_t> data,
                                          std::span<const CounterField> fields) {
  std::vector<CounterValue> values;
  values.reserve(fields.size());
  for (const auto& field : fields) {
    values.push_back({field.counter, read_bits(data, field.bit_offset, field.width), field.width});
  }
  return values;
}

}  // namespace ibprobe::fabric::mad

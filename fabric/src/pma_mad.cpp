#include "pma_mad.h"

#include <infiniband/mad.h>

#include <algorithm>
#include <charconv>
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

struct DetailField {
  std::string_view counter;
  MAD_FIELDS field;
};

// Every detail counter is 16 bits wide (libibmad fields.c; IBA vol. 1 16.1.4.x).
constexpr int kDetailWidth = 16;

constexpr DetailField kRcvErrorDetails[] = {
    {"port_local_physical_errors", IB_PC_RCV_LOCAL_PHY_ERR_F},
    {"port_malformed_packet_errors", IB_PC_RCV_MALFORMED_PKT_ERR_F},
    {"port_buffer_overrun_errors", IB_PC_RCV_BUF_OVR_ERR_F},
    {"port_dlid_mapping_errors", IB_PC_RCV_DLID_MAP_ERR_F},
    {"port_vl_mapping_errors", IB_PC_RCV_VL_MAP_ERR_F},
    {"port_looping_errors", IB_PC_RCV_LOOPING_ERR_F},
};

constexpr DetailField kXmitDiscardDetails[] = {
    {"port_inactive_discards", IB_PC_XMT_INACT_DISC_F},
    {"port_neighbor_mtu_discards", IB_PC_XMT_NEIGH_MTU_DISC_F},
    {"port_sw_lifetime_limit_discards", IB_PC_XMT_SW_LIFE_DISC_F},
    {"port_sw_hoq_lifetime_limit_discards", IB_PC_XMT_SW_HOL_DISC_F},
};

constexpr std::string_view kVlXmitWaitPrefix = "port_vl_xmit_wait_";
constexpr std::string_view kVlXmitWait[] = {
    "port_vl_xmit_wait_0",  "port_vl_xmit_wait_1",  "port_vl_xmit_wait_2",  "port_vl_xmit_wait_3",
    "port_vl_xmit_wait_4",  "port_vl_xmit_wait_5",  "port_vl_xmit_wait_6",  "port_vl_xmit_wait_7",
    "port_vl_xmit_wait_8",  "port_vl_xmit_wait_9",  "port_vl_xmit_wait_10", "port_vl_xmit_wait_11",
    "port_vl_xmit_wait_12", "port_vl_xmit_wait_13", "port_vl_xmit_wait_14", "port_vl_xmit_wait_15",
};

std::uint64_t decode_detail_field(std::span<const std::uint8_t> data, MAD_FIELDS field) {
  // libibmad reads through a non-const pointer; give it a copy of the data area.
  std::array<std::uint8_t, kMadSize - kDataOffset> copy{};
  std::copy_n(data.begin(), std::min(data.size(), copy.size()), copy.begin());
  std::uint32_t value = 0;
  mad_decode_field(copy.data(), field, &value);
  return value;
}

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

constexpr EnumNames<Attribute, 9> kAttributeNames{
    {{Attribute::kClassPortInfo, "ClassPortInfo"},
     {Attribute::kNodeInfo, "NodeInfo"},
     {Attribute::kPortCounters, "PortCounters"},
     {Attribute::kPortRcvErrorDetails, "PortRcvErrorDetails"},
     {Attribute::kPortXmitDiscardDetails, "PortXmitDiscardDetails"},
     {Attribute::kPortVLXmitWaitCounters, "PortVLXmitWaitCounters"},
     {Attribute::kPortCountersExtended, "PortCountersExtended"},
     {Attribute::kPortExtendedSpeedsCounters, "PortExtendedSpeedsCounters"},
     {Attribute::kPortInfoExtended, "PortInfoExtended"}}};

// libibmad iba_types.h: PortInfoExtended CapabilityMask IsFECModeSupported, and the FECModeActive
// values perfquery reads the RS-FEC layout for (IB_PORT_EXT_RS_FEC_MODE_ACTIVE,
// IB_PORT_EXT_RS_FEC2_MODE_ACTIVE).
constexpr std::uint32_t kPortInfoExtendedFecModeSupported = 0x00000001;
constexpr std::uint32_t kFecModeRsFec = 0x0002;
constexpr std::uint32_t kFecModeRsFec2 = 0x0004;

// The IB_PESC_*, IB_PESC_RSFEC_* and IB_PORT_EXT_* fields are 32 bits wide at most:
// mad_decode_field into a uint32_t, as for the detail counters.
template <typename T>
T decode_field_as(std::span<const std::uint8_t> data, MAD_FIELDS field) {
  return static_cast<T>(decode_detail_field(data, field));
}

}  // namespace

std::string_view to_string(Attribute attribute) {
  return name_of(kAttributeNames, attribute, "unknown attribute");
}

bool is_per_port(Attribute attribute) {
  return attribute == Attribute::kPortCounters || attribute == Attribute::kPortCountersExtended ||
         attribute == Attribute::kPortExtendedSpeedsCounters ||
         std::find(kDetailAttributes.begin(), kDetailAttributes.end(), attribute) !=
             kDetailAttributes.end();
}

bool is_unsupported_status(std::uint16_t status) {
  const unsigned invalid_field = (status >> 2) & 0x7;
  return invalid_field == 2 || invalid_field == 3;  // method, method/attribute not supported
}

Mad encode_get(const Request& request) {
  Mad mad{};
  mad[0] = kBaseVersion;
  mad[1] = static_cast<std::uint8_t>(request.mgmt_class);
  mad[2] = kClassVersion;
  mad[3] = static_cast<std::uint8_t>(Method::kGet);
  put_be(mad, kTransactionIdOffset, request.transaction_id, 8);
  put_be(mad, kAttributeIdOffset, static_cast<std::uint16_t>(request.attribute), 2);
  put_be(mad, kAttributeModifierOffset, request.attribute_modifier, 4);
  if (is_per_port(request.attribute)) mad[kDataOffset + 1] = request.port_select;
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

std::vector<CounterValue> decode_detail_counters(Attribute attribute,
                                                 std::span<const std::uint8_t> data) {
  std::vector<CounterValue> values;
  auto decode_all = [&](std::span<const DetailField> fields) {
    for (const auto& [counter, field] : fields) {
      values.push_back({counter, decode_detail_field(data, field), kDetailWidth});
    }
  };
  switch (attribute) {
    case Attribute::kPortRcvErrorDetails:
      decode_all(kRcvErrorDetails);
      break;
    case Attribute::kPortXmitDiscardDetails:
      decode_all(kXmitDiscardDetails);
      break;
    case Attribute::kPortVLXmitWaitCounters:
      for (int vl = 0; vl < static_cast<int>(std::size(kVlXmitWait)); ++vl) {
        const auto field = static_cast<MAD_FIELDS>(IB_PC_PORT_VL_XMIT_WAIT0_F + vl);
        values.push_back({kVlXmitWait[vl], decode_detail_field(data, field), kDetailWidth});
      }
      break;
    default:
      break;
  }
  return values;
}

std::optional<int> vl_of_xmit_wait(std::string_view counter) {
  if (!counter.starts_with(kVlXmitWaitPrefix)) return std::nullopt;
  counter.remove_prefix(kVlXmitWaitPrefix.size());
  int vl = 0;
  const auto [end, ec] = std::from_chars(counter.data(), counter.data() + counter.size(), vl);
  if (ec != std::errc() || end != counter.data() + counter.size()) return std::nullopt;
  return vl;
}

ExtendedSpeedsCounters decode_extended_speeds_counters(std::span<const std::uint8_t> data,
                                                       FecLayout layout) {
  ExtendedSpeedsCounters counters;
  counters.layout = layout;
  const bool rs_fec = layout == FecLayout::kRsFec;
  counters.sync_header_errors = decode_field_as<std::uint16_t>(
      data, rs_fec ? IB_PESC_RSFEC_SYNC_HDR_ERR_CTR_F : IB_PESC_SYNC_HDR_ERR_CTR_F);
  counters.unknown_blocks = decode_field_as<std::uint16_t>(
      data, rs_fec ? IB_PESC_RSFEC_UNK_BLOCK_CTR_F : IB_PESC_UNK_BLOCK_CTR_F);
  for (std::size_t lane = 0; lane < kFecLanes; ++lane) {
    const int i = static_cast<int>(lane);
    if (rs_fec) {
      counters.lane_corrected[lane] = decode_field_as<std::uint32_t>(
          data, static_cast<MAD_FIELDS>(IB_PESC_RSFEC_FEC_CORR_SYMBOL_CTR_LANE0_F + i));
      continue;
    }
    counters.lane_error_detections[lane] = decode_field_as<std::uint16_t>(
        data, static_cast<MAD_FIELDS>(IB_PESC_ERR_DET_CTR_LANE0_F + i));
    counters.lane_corrected[lane] = decode_field_as<std::uint32_t>(
        data, static_cast<MAD_FIELDS>(IB_PESC_FEC_CORR_BLOCK_CTR_LANE0_F + i));
    counters.lane_uncorrectable_blocks[lane] = decode_field_as<std::uint32_t>(
        data, static_cast<MAD_FIELDS>(IB_PESC_FEC_UNCORR_BLOCK_CTR_LANE0_F + i));
  }
  if (rs_fec) {
    counters.corrected_blocks =
        decode_field_as<std::uint32_t>(data, IB_PESC_PORT_FEC_CORR_BLOCK_CTR_F);
    counters.uncorrectable_blocks =
        decode_field_as<std::uint32_t>(data, IB_PESC_PORT_FEC_UNCORR_BLOCK_CTR_F);
    counters.corrected_symbols =
        decode_field_as<std::uint32_t>(data, IB_PESC_PORT_FEC_CORR_SYMBOL_CTR_F);
  }
  return counters;
}

bool rs_fec_active(std::span<const std::uint8_t> port_info_extended) {
  const auto capabilities =
      decode_field_as<std::uint32_t>(port_info_extended, IB_PORT_EXT_CAPMASK_F);
  const auto mode =
      decode_field_as<std::uint32_t>(port_info_extended, IB_PORT_EXT_FEC_MODE_ACTIVE_F) & 0xFFFF;
  return (capabilities & kPortInfoExtendedFecModeSupported) &&
         (mode == kFecModeRsFec || mode == kFecModeRsFec2);
}

}  // namespace ibprobe::fabric::mad

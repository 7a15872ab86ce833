// MAD byte vectors written by hand from the IBA field tables, independently of the codec under
// test: the common header, and big-endian fields placed one bit at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ibprobe::testing {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::size_t kMadBytes = 256;
inline constexpr std::size_t kDataStart = 64;  // 24-byte header + 40 reserved (PerfMgt) bytes

// Sets `width` bits of `data`, starting `bit_offset` bits in, to `value`, most significant bit
// first (bit 0 is the top bit of byte 0).
inline void put_bits(Bytes& data, std::size_t bit_offset, int width, std::uint64_t value) {
  for (int i = 0; i < width; ++i) {
    const std::size_t bit = bit_offset + static_cast<std::size_t>(i);
    const bool set = (value >> (width - 1 - i)) & 1;
    const auto mask = static_cast<std::uint8_t>(0x80u >> (bit % 8));
    data[bit / 8] = set ? (data[bit / 8] | mask) : (data[bit / 8] & ~mask);
  }
}

// A whole MAD: header fields at their byte offsets, attribute data from byte 64.
inline Bytes mad_bytes(std::uint8_t mgmt_class, std::uint8_t method, std::uint16_t attribute,
                       std::uint64_t tid = 0, std::uint16_t status = 0, const Bytes& data = {}) {
  Bytes mad(kMadBytes, 0);
  mad[0] = 1;  // BaseVersion
  mad[1] = mgmt_class;
  mad[2] = 1;  // ClassVersion
  mad[3] = method;
  mad[4] = static_cast<std::uint8_t>(status >> 8);
  mad[5] = static_cast<std::uint8_t>(status);
  for (int i = 0; i < 8; ++i) mad[8 + i] = static_cast<std::uint8_t>(tid >> (56 - 8 * i));
  mad[16] = static_cast<std::uint8_t>(attribute >> 8);
  mad[17] = static_cast<std::uint8_t>(attribute);
  for (std::size_t i = 0; i < data.size() && kDataStart + i < kMadBytes; ++i) {
    mad[kDataStart + i] = data[i];
  }
  return mad;
}

struct MadField {
  std::string counter;  // as ports/N/counters/ names it
  std::size_t bit_offset;
  int width;
};

// IBA PortCounters (attribute 0x0012), bit offsets in the data area.
inline const std::vector<MadField> kPortCounters = {
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

// IBA PortCountersExtended (attribute 0x001D).
inline const std::vector<MadField> kPortCountersExtended = {
    {"port_xmit_data", 64, 64},          {"port_rcv_data", 128, 64},
    {"port_xmit_packets", 192, 64},      {"port_rcv_packets", 256, 64},
    {"unicast_xmit_packets", 320, 64},   {"unicast_rcv_packets", 384, 64},
    {"multicast_xmit_packets", 448, 64}, {"multicast_rcv_packets", 512, 64},
};

inline Bytes data_area() {
  return Bytes(kMadBytes - kDataStart, 0);
}

// IBA PortRcvErrorDetails (0x0015) and PortXmitDiscardDetails (0x0016): 16-bit fields after
// PortSelect and CounterSelect, in the order of the attribute's table.
inline const std::vector<MadField> kPortRcvErrorDetails = {
    {"port_local_physical_errors", 32, 16}, {"port_malformed_packet_errors", 48, 16},
    {"port_buffer_overrun_errors", 64, 16}, {"port_dlid_mapping_errors", 80, 16},
    {"port_vl_mapping_errors", 96, 16},     {"port_looping_errors", 112, 16},
};
inline const std::vector<MadField> kPortXmitDiscardDetails = {
    {"port_inactive_discards", 32, 16},
    {"port_neighbor_mtu_discards", 48, 16},
    {"port_sw_lifetime_limit_discards", 64, 16},
    {"port_sw_hoq_lifetime_limit_discards", 80, 16},
};
// IBA PortVLXmitWaitCounters (0x001C): PortVLXmitWait[0..15], 16 bits each, from bit 32.
inline std::vector<MadField> port_vl_xmit_wait_counters() {
  std::vector<MadField> fields;
  for (int vl = 0; vl < 16; ++vl) {
    fields.push_back(
        {"port_vl_xmit_wait_" + std::to_string(vl), 32 + 16 * static_cast<std::size_t>(vl), 16});
  }
  return fields;
}

// IBA PortExtendedSpeedsCounters (0x001F), bit offsets in the data area as the IBA table gives
// them (and libibmad's fields.c copies them): after PortSelect (8/8) and CounterSelect (64/64),
// SyncHeaderErrorCounter 128/16 and UnknownBlockCounter 144/16, then per lane 0..11
// ErrorDetectionCounterLane 160+16i/16, FECCorrectableBlockCtrLane 352+32i/32 and
// FECUncorrectableBlockCtrLane 736+32i/32.
inline std::vector<MadField> port_extended_speeds_counters() {
  std::vector<MadField> fields = {{"sync_header_errors", 128, 16}, {"unknown_blocks", 144, 16}};
  for (std::size_t lane = 0; lane < 12; ++lane) {
    const auto n = std::to_string(lane);
    fields.push_back({"error_detection_" + n, 160 + 16 * lane, 16});
    fields.push_back({"corrected_blocks_" + n, 352 + 32 * lane, 32});
    fields.push_back({"uncorrectable_blocks_" + n, 736 + 32 * lane, 32});
  }
  return fields;
}
// The same attribute in its RS-FEC layout: the two block counters as before, then
// FECCorrectableSymbolCtrLane 352+32i/32 and the port's PortFECCorrectableBlockCtr 1120/32,
// PortFECUncorrectableBlockCtr 1152/32 and PortFECCorrectedSymbolCtr 1184/32.
inline std::vector<MadField> port_extended_speeds_counters_rs_fec() {
  std::vector<MadField> fields = {{"sync_header_errors", 128, 16},
                                  {"unknown_blocks", 144, 16},
                                  {"corrected_blocks", 1120, 32},
                                  {"uncorrectable_blocks", 1152, 32},
                                  {"corrected_symbols", 1184, 32}};
  for (std::size_t lane = 0; lane < 12; ++lane) {
    fields.push_back({"corrected_symbols_" + std::to_string(lane), 352 + 32 * lane, 32});
  }
  return fields;
}

}  // namespace ibprobe::testing

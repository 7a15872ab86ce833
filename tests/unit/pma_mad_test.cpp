// Golden tests of the MAD codec: byte vectors built by hand from the IBA bit tables.
#include "pma_mad.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "mad_bytes.h"

namespace ibprobe::testing {
namespace {

namespace mad = fabric::mad;

std::uint64_t all_ones(int width) {
  return width == 64 ? ~0ull : (1ull << width) - 1;
}

std::map<std::string, mad::CounterValue> decoded(const Bytes& data,
                                                 std::span<const mad::CounterField> fields) {
  std::map<std::string, mad::CounterValue> by_name;
  for (const auto& value : mad::decode_counters(data, fields)) {
    by_name.emplace(std::string(value.counter), value);
  }
  return by_name;
}

// Every field alone at all ones, then alone at zero among all ones: a field that reads one bit
// too far or too short, or into its neighbour, shows in one of the two.
void check_fields_in_isolation(const std::vector<MadField>& table,
                               std::span<const mad::CounterField> fields) {
  ASSERT_EQ(fields.size(), table.size());
  for (const auto& field : table) {
    Bytes only = data_area();
    put_bits(only, field.bit_offset, field.width, all_ones(field.width));
    Bytes all_but = Bytes(data_area().size(), 0xFF);
    put_bits(all_but, field.bit_offset, field.width, 0);
    const auto only_values = decoded(only, fields);
    const auto all_but_values = decoded(all_but, fields);
    for (const auto& other : table) {
      const bool same = other.counter == field.counter;
      ASSERT_TRUE(only_values.contains(other.counter)) << other.counter;
      EXPECT_EQ(only_values.at(other.counter).value, same ? all_ones(other.width) : 0)
          << field.counter << " set, read " << other.counter;
      EXPECT_EQ(all_but_values.at(other.counter).value, same ? 0 : all_ones(other.width))
          << field.counter << " cleared, read " << other.counter;
      EXPECT_EQ(only_values.at(other.counter).width, other.width) << other.counter;
    }
  }
}

TEST(PmaMad, PortCountersEveryFieldInIsolation) {
  check_fields_in_isolation(kPortCounters, mad::port_counters_fields());
}

TEST(PmaMad, PortCountersExtendedEveryFieldInIsolation) {
  check_fields_in_isolation(kPortCountersExtended, mad::port_counters_extended_fields());
}

// The detail attributes, decoded through libibmad's tables, against the IBA offsets written here.
TEST(PmaMad, DetailAttributesEveryFieldInIsolation) {
  const std::vector<std::pair<mad::Attribute, std::vector<MadField>>> attributes = {
      {mad::Attribute::kPortRcvErrorDetails, kPortRcvErrorDetails},
      {mad::Attribute::kPortXmitDiscardDetails, kPortXmitDiscardDetails},
      {mad::Attribute::kPortVLXmitWaitCounters, port_vl_xmit_wait_counters()},
  };
  for (const auto& [attribute, table] : attributes) {
    for (const auto& field : table) {
      Bytes only = data_area();
      put_bits(only, field.bit_offset, field.width, all_ones(field.width));
      put_bits(only, 8, 8, 0xFF);  // PortSelect: not a counter
      Bytes all_but = Bytes(data_area().size(), 0xFF);
      put_bits(all_but, field.bit_offset, field.width, 0);
      const auto only_values = mad::decode_detail_counters(attribute, only);
      const auto all_but_values = mad::decode_detail_counters(attribute, all_but);
      ASSERT_EQ(only_values.size(), table.size()) << mad::to_string(attribute);
      ASSERT_EQ(all_but_values.size(), table.size());
      for (std::size_t i = 0; i < table.size(); ++i) {
        const bool same = table[i].counter == field.counter;
        EXPECT_EQ(only_values[i].counter, table[i].counter);
        EXPECT_EQ(only_values[i].width, 16);
        EXPECT_EQ(only_values[i].value, same ? 0xFFFFu : 0u)
            << field.counter << " set, read " << table[i].counter;
        EXPECT_EQ(all_but_values[i].value, same ? 0u : 0xFFFFu)
            << field.counter << " cleared, read " << table[i].counter;
      }
    }
  }
  EXPECT_TRUE(mad::decode_detail_counters(mad::Attribute::kPortCounters, data_area()).empty());
}

TEST(PmaMad, NamesTheVirtualLaneOfAnXmitWaitCounter) {
  EXPECT_EQ(mad::vl_of_xmit_wait("port_vl_xmit_wait_0"), 0);
  EXPECT_EQ(mad::vl_of_xmit_wait("port_vl_xmit_wait_15"), 15);
  EXPECT_EQ(mad::vl_of_xmit_wait("port_vl_xmit_wait_"), std::nullopt);
  EXPECT_EQ(mad::vl_of_xmit_wait("port_vl_xmit_wait_1x"), std::nullopt);
  EXPECT_EQ(mad::vl_of_xmit_wait("port_xmit_wait"), std::nullopt);
}

TEST(PmaMad, TellsUnsupportedAttributeStatusFromOtherFailures) {
  EXPECT_TRUE(mad::is_unsupported_status(0x000C));   // method/attribute not supported
  EXPECT_TRUE(mad::is_unsupported_status(0x0008));   // method not supported
  EXPECT_FALSE(mad::is_unsupported_status(0x001C));  // invalid attribute field or modifier
  EXPECT_FALSE(mad::is_unsupported_status(0x0001));  // busy
  EXPECT_FALSE(mad::is_unsupported_status(0));
}

// Distinct values in every field at once, so no field can pass by reading its neighbour.
TEST(PmaMad, PortCountersDistinctValues) {
  Bytes data = data_area();
  std::map<std::string, std::uint64_t> expected;
  std::uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (const auto& field : kPortCounters) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t value = (seed >> 7) & all_ones(field.width);
    put_bits(data, field.bit_offset, field.width, value);
    expected[field.counter] = value;
  }
  for (const auto& [name, value] : decoded(data, mad::port_counters_fields())) {
    EXPECT_EQ(value.value, expected.at(name)) << name;
  }
}

// Literal bytes for the fields sharing a byte or crossing 32 bits.
TEST(PmaMad, PortCountersLiteralBytes) {
  Bytes data = data_area();
  data[1] = 0x07;                    // PortSelect
  data[2] = 0x12, data[3] = 0x34;    // CounterSelect
  data[4] = 0xAB, data[5] = 0xCD;    // SymbolErrorCounter
  data[6] = 0xEF;                    // LinkErrorRecoveryCounter
  data[7] = 0x01;                    // LinkDownedCounter
  data[19] = 0x5A;                   // LocalLinkIntegrityErrors 5, ExcessiveBufferOverrunErrors A
  data[22] = 0xFF, data[23] = 0xFE;  // VL15Dropped
  data[24] = 0xDE, data[25] = 0xAD, data[26] = 0xBE, data[27] = 0xEF;  // PortXmitData
  data[40] = 0x00, data[41] = 0x00, data[42] = 0x01, data[43] = 0x00;  // PortXmitWait
  EXPECT_EQ(mad::port_select_of(data), 7);
  const auto values = decoded(data, mad::port_counters_fields());
  EXPECT_EQ(values.at("symbol_error").value, 0xABCDu);
  EXPECT_EQ(values.at("link_error_recovery").value, 0xEFu);
  EXPECT_EQ(values.at("link_downed").value, 0x01u);
  EXPECT_EQ(values.at("local_link_integrity_errors").value, 0x5u);
  EXPECT_EQ(values.at("excessive_buffer_overrun_errors").value, 0xAu);
  EXPECT_EQ(values.at("VL15_dropped").value, 0xFFFEu);
  EXPECT_EQ(values.at("port_xmit_data").value, 0xDEADBEEFu);
  EXPECT_EQ(values.at("port_xmit_wait").value, 0x100u);
  EXPECT_EQ(values.at("port_rcv_data").value, 0u);
}

TEST(PmaMad, PortCountersExtendedLiteralBytes) {
  Bytes data = data_area();
  data[1] = 0xFF;  // PortSelect: all ports
  for (int i = 0; i < 8; ++i) data[8 + i] = static_cast<std::uint8_t>(0x01 + i);   // PortXmitData
  for (int i = 0; i < 8; ++i) data[64 + i] = static_cast<std::uint8_t>(0xF0 + i);  // McastRcv
  EXPECT_EQ(mad::port_select_of(data), 0xFF);
  const auto values = decoded(data, mad::port_counters_extended_fields());
  EXPECT_EQ(values.at("port_xmit_data").value, 0x0102030405060708ull);
  EXPECT_EQ(values.at("multicast_rcv_packets").value, 0xF0F1F2F3F4F5F6F7ull);
  EXPECT_EQ(values.at("port_rcv_data").value, 0u);
}

TEST(PmaMad, ClassPortInfoEveryField) {
  Bytes data = data_area();
  data[0] = 0x01;                                                  // BaseVersion
  data[1] = 0x02;                                                  // ClassVersion
  data[2] = 0x17, data[3] = 0x00;                                  // CapabilityMask
  data[4] = 0xAB, data[5] = 0xCD, data[6] = 0xEF, data[7] = 0x53;  // CapMask2 27 | Resp 5
  const auto info = mad::decode_class_port_info(data);
  EXPECT_EQ(info.base_version, 1);
  EXPECT_EQ(info.class_version, 2);
  EXPECT_EQ(info.capability_mask, 0x1700);
  EXPECT_EQ(info.capability_mask2, 0xABCDEF53u >> 5);
  EXPECT_EQ(info.resp_time_value, 0x13);
  EXPECT_EQ(info.capability_mask & mad::kCapAllPortSelect, 0x0100);
  EXPECT_EQ(info.capability_mask & mad::kCapExtendedWidth, 0x0200);
  EXPECT_EQ(info.capability_mask & mad::kCapExtendedWidthNoIetf, 0x0400);
  EXPECT_EQ(info.capability_mask & mad::kCapPortXmitWait, 0x1000);
}

TEST(PmaMad, NodeInfoFields) {
  Bytes data = data_area();
  data[2] = 2;                                     // NodeType: switch
  data[3] = 36;                                    // NumPorts
  for (int i = 0; i < 8; ++i) data[4 + i] = 0xEE;  // SystemImageGUID: must not leak
  for (int i = 0; i < 8; ++i) data[12 + i] = static_cast<std::uint8_t>(0x10 * i + 1);  // NodeGUID
  for (int i = 0; i < 8; ++i) data[20 + i] = 0xCC;  // PortGUID: must not leak
  const auto info = mad::decode_node_info(data);
  EXPECT_EQ(info.num_ports, 36);
  EXPECT_EQ(info.node_guid, 0x0111213141516171ull);
}

TEST(PmaMad, EncodesGetOfEachAttribute) {
  struct Case {
    mad::Request request;
    std::uint8_t mgmt_class;
    std::uint16_t attribute;
    int port_select_byte;  // -1: no PortSelect in the request
  };
  const std::vector<Case> cases = {
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kClassPortInfo, 0x0102030405060708ull},
       0x04,
       0x0001,
       -1},
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCounters, 0xA1B2C3D4ull, 5},
       0x04,
       0x0012,
       5},
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kPortCountersExtended, 7, 0xFF},
       0x04,
       0x001D,
       0xFF},
      {{mad::MgmtClass::kSubnLidRouted, mad::Attribute::kNodeInfo, 9}, 0x01, 0x0011, -1},
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kPortRcvErrorDetails, 10, 3}, 0x04, 0x0015, 3},
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kPortXmitDiscardDetails, 11, 4}, 0x04, 0x0016, 4},
      {{mad::MgmtClass::kPerfMgt, mad::Attribute::kPortVLXmitWaitCounters, 12, 0xFF},
       0x04,
       0x001C,
       0xFF},
  };
  for (const auto& c : cases) {
    Bytes expected = mad_bytes(c.mgmt_class, 0x01, c.attribute, c.request.transaction_id);
    if (c.port_select_byte >= 0)
      expected[kDataStart + 1] = static_cast<std::uint8_t>(c.port_select_byte);
    const auto actual = mad::encode_get(c.request);
    EXPECT_EQ(Bytes(actual.begin(), actual.end()), expected) << "attribute " << c.attribute;
  }
}

TEST(PmaMad, DecodesHeader) {
  Bytes bytes = mad_bytes(0x04, 0x81, 0x001D, 0x1122334455667788ull, 0x001C);
  bytes[20] = 0x00, bytes[21] = 0x00, bytes[22] = 0x01, bytes[23] = 0x02;  // AttributeModifier
  const auto header = mad::decode_header(bytes);
  ASSERT_TRUE(header);
  EXPECT_EQ(header->base_version, 1);
  EXPECT_EQ(header->mgmt_class, mad::MgmtClass::kPerfMgt);
  EXPECT_EQ(header->class_version, 1);
  EXPECT_EQ(header->method, mad::Method::kGetResp);
  EXPECT_EQ(header->status, 0x001C);
  EXPECT_EQ(header->transaction_id, 0x1122334455667788ull);
  EXPECT_EQ(header->attribute, mad::Attribute::kPortCountersExtended);
  EXPECT_EQ(header->attribute_modifier, 0x102u);
  EXPECT_FALSE(mad::decode_header(Bytes(23, 0)));
}

TEST(PmaMad, DataAreaNeedsAWholeMad) {
  const Bytes whole(256, 0);
  EXPECT_EQ(mad::data_of(whole).size(), 192u);
  EXPECT_EQ(mad::data_of(whole).data(), whole.data() + 64);
  EXPECT_TRUE(mad::data_of(Bytes(255, 0)).empty());
}

TEST(PmaMad, DescribesStatusPrecisely) {
  EXPECT_EQ(mad::describe_status(0x0004), "0x0004 (bad base or class version)");
  EXPECT_EQ(mad::describe_status(0x0008), "0x0008 (method not supported)");
  EXPECT_EQ(mad::describe_status(0x000C), "0x000c (method/attribute combination not supported)");
  EXPECT_EQ(mad::describe_status(0x001C), "0x001c (invalid attribute field or modifier)");
  EXPECT_EQ(mad::describe_status(0x0001), "0x0001 (busy)");
  EXPECT_EQ(mad::describe_status(0x0002), "0x0002 (redirect required)");
  EXPECT_EQ(mad::describe_status(0x0100), "0x0100 (class-specific bits set)");
}

// PortExtendedSpeedsCounters decoded by the code under test, named as the test's own tables
// (mad_bytes.h) name the fields, for comparing field by field.
std::map<std::string, std::uint64_t> extended_speeds_by_name(const Bytes& data,
                                                             mad::FecLayout layout) {
  const auto c = mad::decode_extended_speeds_counters(data, layout);
  EXPECT_EQ(c.layout, layout);
  std::map<std::string, std::uint64_t> values{{"sync_header_errors", c.sync_header_errors},
                                              {"unknown_blocks", c.unknown_blocks}};
  for (std::size_t lane = 0; lane < mad::kFecLanes; ++lane) {
    const auto n = std::to_string(lane);
    if (layout == mad::FecLayout::kRsFec) {
      values["corrected_symbols_" + n] = c.lane_corrected[lane];
      EXPECT_EQ(c.lane_error_detections[lane], 0) << "no error detection in the RS-FEC layout";
      EXPECT_EQ(c.lane_uncorrectable_blocks[lane], 0u) << "no lane blocks in the RS-FEC layout";
    } else {
      values["error_detection_" + n] = c.lane_error_detections[lane];
      values["corrected_blocks_" + n] = c.lane_corrected[lane];
      values["uncorrectable_blocks_" + n] = c.lane_uncorrectable_blocks[lane];
    }
  }
  if (layout == mad::FecLayout::kRsFec) {
    values["corrected_blocks"] = c.corrected_blocks;
    values["uncorrectable_blocks"] = c.uncorrectable_blocks;
    values["corrected_symbols"] = c.corrected_symbols;
  } else {
    EXPECT_EQ(c.corrected_blocks + c.uncorrectable_blocks + c.corrected_symbols, 0u)
        << "no port totals in the block layout";
  }
  return values;
}

// Each field of both layouts alone at all ones, then alone at zero among all ones, against the
// IBA offsets written in mad_bytes.h (libibmad's tables are what the decoder uses).
TEST(PmaMad, ExtendedSpeedsCountersEveryFieldInIsolation) {
  const std::pair<mad::FecLayout, std::vector<MadField>> layouts[] = {
      {mad::FecLayout::kBlocks, port_extended_speeds_counters()},
      {mad::FecLayout::kRsFec, port_extended_speeds_counters_rs_fec()},
  };
  for (const auto& [layout, table] : layouts) {
    for (const auto& field : table) {
      Bytes only = data_area();
      put_bits(only, field.bit_offset, field.width, all_ones(field.width));
      put_bits(only, 8, 8, 0xFF);     // PortSelect
      put_bits(only, 64, 64, ~0ull);  // CounterSelect: neither is a counter
      Bytes all_but = Bytes(data_area().size(), 0xFF);
      put_bits(all_but, field.bit_offset, field.width, 0);
      const auto only_values = extended_speeds_by_name(only, layout);
      const auto all_but_values = extended_speeds_by_name(all_but, layout);
      ASSERT_EQ(only_values.size(), table.size());
      for (const auto& other : table) {
        const bool same = other.counter == field.counter;
        ASSERT_TRUE(only_values.contains(other.counter)) << other.counter;
        EXPECT_EQ(only_values.at(other.counter), same ? all_ones(other.width) : 0)
            << field.counter << " set, read " << other.counter;
        EXPECT_EQ(all_but_values.at(other.counter), same ? 0 : all_ones(other.width))
            << field.counter << " cleared, read " << other.counter;
      }
    }
  }
}

// An EDR port's answer as perfquery --extended_speeds would print it, with distinct values in
// every field of both layouts (written at the IBA offsets), decoded in each layout.
TEST(PmaMad, ExtendedSpeedsCountersDistinctValuesInBothLayouts) {
  for (const auto& [layout, table] :
       {std::pair{mad::FecLayout::kBlocks, port_extended_speeds_counters()},
        std::pair{mad::FecLayout::kRsFec, port_extended_speeds_counters_rs_fec()}}) {
    Bytes data = data_area();
    data[1] = 3;  // PortSelect
    std::map<std::string, std::uint64_t> expected;
    std::uint64_t seed = 0x2545F4914F6CDD1Dull;
    for (const auto& field : table) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const std::uint64_t value = (seed >> 11) & all_ones(field.width);
      put_bits(data, field.bit_offset, field.width, value);
      expected[field.counter] = value;
    }
    EXPECT_EQ(mad::port_select_of(data), 3);
    EXPECT_EQ(extended_speeds_by_name(data, layout), expected);
  }
}

// Literal bytes: lane 0's and lane 11's counters and the RS-FEC port totals at their byte
// positions (bit offset / 8), big-endian.
TEST(PmaMad, ExtendedSpeedsCountersLiteralBytes) {
  Bytes data = data_area();
  data[16] = 0x01, data[17] = 0x02;  // SyncHeaderErrorCounter, bit 128
  data[18] = 0x03, data[19] = 0x04;  // UnknownBlockCounter, bit 144
  data[20] = 0x05, data[21] = 0x06;  // ErrorDetectionCounterLane0, bit 160
  data[42] = 0x07, data[43] = 0x08;  // ErrorDetectionCounterLane11, bit 336
  data[44] = 0x11, data[45] = 0x22, data[46] = 0x33, data[47] = 0x44;      // lane 0 corrected, 352
  data[88] = 0x55, data[89] = 0x66, data[90] = 0x77, data[91] = 0x88;      // lane 11 corrected, 704
  data[92] = 0x99, data[93] = 0xAA, data[94] = 0xBB, data[95] = 0xCC;      // lane 0 uncorr., 736
  data[136] = 0xDD, data[137] = 0xEE, data[138] = 0xFF, data[139] = 0x00;  // lane 11 uncorr.
  data[140] = 0x00, data[141] = 0x00, data[142] = 0x01, data[143] = 0x00;  // port corr., 1120
  data[144] = 0x00, data[145] = 0x00, data[146] = 0x00, data[147] = 0x02;  // port uncorr., 1152
  data[148] = 0x00, data[149] = 0x01, data[150] = 0x00, data[151] = 0x00;  // port symbols, 1184
  const auto blocks = mad::decode_extended_speeds_counters(data, mad::FecLayout::kBlocks);
  EXPECT_EQ(blocks.sync_header_errors, 0x0102);
  EXPECT_EQ(blocks.unknown_blocks, 0x0304);
  EXPECT_EQ(blocks.lane_error_detections[0], 0x0506);
  EXPECT_EQ(blocks.lane_error_detections[11], 0x0708);
  EXPECT_EQ(blocks.lane_corrected[0], 0x11223344u);
  EXPECT_EQ(blocks.lane_corrected[11], 0x55667788u);
  EXPECT_EQ(blocks.lane_uncorrectable_blocks[0], 0x99AABBCCu);
  EXPECT_EQ(blocks.lane_uncorrectable_blocks[11], 0xDDEEFF00u);
  const auto rs = mad::decode_extended_speeds_counters(data, mad::FecLayout::kRsFec);
  EXPECT_EQ(rs.sync_header_errors, 0x0102);
  EXPECT_EQ(rs.lane_corrected[0], 0x11223344u);  // now FECCorrectableSymbolCtrLane0
  EXPECT_EQ(rs.lane_corrected[11], 0x55667788u);
  EXPECT_EQ(rs.corrected_blocks, 0x100u);
  EXPECT_EQ(rs.uncorrectable_blocks, 2u);
  EXPECT_EQ(rs.corrected_symbols, 0x10000u);
}

// PortInfoExtended (IBA 14.2.5.21, libibmad fields.c): CapabilityMask 0/32 (bit 0
// IsFECModeSupported), FECModeActive 32/16 (0 none, 1 Fire-Code, 2 RS-FEC, 3 low-latency RS-FEC,
// 4 RS-FEC2 as iba_types.h names them). perfquery reads the RS-FEC layout for 2 and 4 only.
TEST(PmaMad, RsFecActiveAsPerfqueryDecidesIt) {
  auto port_info_extended = [](std::uint32_t capability_mask, std::uint16_t mode) {
    Bytes data = data_area();
    put_bits(data, 0, 32, capability_mask);
    put_bits(data, 32, 16, mode);
    put_bits(data, 48, 16, 0xFFFF);  // FDRFECModeSupported: not the active mode
    return data;
  };
  EXPECT_TRUE(mad::rs_fec_active(port_info_extended(1, 2)));
  EXPECT_TRUE(mad::rs_fec_active(port_info_extended(1, 4)));
  EXPECT_FALSE(mad::rs_fec_active(port_info_extended(1, 0)));
  EXPECT_FALSE(mad::rs_fec_active(port_info_extended(1, 1)));
  EXPECT_FALSE(mad::rs_fec_active(port_info_extended(1, 3)));
  EXPECT_FALSE(mad::rs_fec_active(port_info_extended(0, 2)));  // FEC mode not supported
  EXPECT_FALSE(mad::rs_fec_active(port_info_extended(0xFFFFFFFE, 2)));
}

// PortExtendedSpeedsCounters carries PortSelect; PortInfoExtended names its port in the attribute
// modifier (bytes 20..23) and has no PortSelect.
TEST(PmaMad, EncodesExtendedSpeedsAndPortInfoExtendedGets) {
  const auto pesc = mad::encode_get(
      {mad::MgmtClass::kPerfMgt, mad::Attribute::kPortExtendedSpeedsCounters, 5, 17});
  Bytes expected = mad_bytes(0x04, 0x01, 0x001F, 5);
  expected[kDataStart + 1] = 17;
  EXPECT_EQ(Bytes(pesc.begin(), pesc.end()), expected);
  const auto pie = mad::encode_get(
      {mad::MgmtClass::kSubnLidRouted, mad::Attribute::kPortInfoExtended, 6, 0, 0x12345678});
  expected = mad_bytes(0x01, 0x01, 0x0033, 6);
  expected[20] = 0x12, expected[21] = 0x34, expected[22] = 0x56, expected[23] = 0x78;
  EXPECT_EQ(Bytes(pie.begin(), pie.end()), expected);
  EXPECT_EQ(mad::kCapRsFecCounters, 0x4000);
}

}  // namespace
}  // namespace ibprobe::testing

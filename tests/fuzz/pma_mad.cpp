// The PerfMgt/SMP MAD codec over any bytes a umad device can hand back: header and attribute
// decoding of a received MAD of any length, every counter field (the detail attributes' too,
// decoded through libibmad, PortExtendedSpeedsCounters in both layouts and PortInfoExtended's
// RS-FEC test among them) checked against a bit-by-bit reading of the IBA layout, and
// encode_get followed by decode_header for any request.
#include "pma_mad.h"

#include <algorithm>
#include <string>
#include <utility>

#include "fuzz.h"

namespace {

using namespace ibprobe::fabric::mad;

// `width` bits from `bit_offset`, most significant first, one bit at a time.
std::uint64_t reference_bits(std::span<const std::uint8_t> data, int bit_offset, int width) {
  std::uint64_t value = 0;
  for (int i = 0; i < width; ++i) {
    const int bit = bit_offset + i;
    value = value << 1 | ((data[static_cast<std::size_t>(bit / 8)] >> (7 - bit % 8)) & 1u);
  }
  return value;
}

std::uint64_t reference_be(std::span<const std::uint8_t> mad, std::size_t offset, int bytes) {
  return reference_bits(mad, static_cast<int>(offset * 8), bytes * 8);
}

void check_counters(std::span<const std::uint8_t> data, std::span<const CounterField> fields) {
  const auto values = decode_counters(data, fields);
  FUZZ_CHECK(values.size() == fields.size(), "%zu values for %zu fields", values.size(),
             fields.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto& field = fields[i];
    FUZZ_CHECK(field.width >= 1 && field.width <= 64 &&
                   field.bit_offset + field.width <= static_cast<int>(data.size() * 8),
               "field %.*s lies outside the data area", static_cast<int>(field.counter.size()),
               field.counter.data());
    FUZZ_CHECK(values[i].value == reference_bits(data, field.bit_offset, field.width),
               "%.*s decoded as %llu", static_cast<int>(field.counter.size()), field.counter.data(),
               static_cast<unsigned long long>(values[i].value));
  }
}

// PortRcvErrorDetails (6 fields), PortXmitDiscardDetails (4), PortVLXmitWaitCounters (16): 16-bit
// counters one after another from bit 32, after PortSelect and CounterSelect.
void check_details(std::span<const std::uint8_t> data) {
  constexpr std::pair<Attribute, std::size_t> kDetails[] = {
      {Attribute::kPortRcvErrorDetails, 6},
      {Attribute::kPortXmitDiscardDetails, 4},
      {Attribute::kPortVLXmitWaitCounters, 16}};
  for (const auto& [attribute, count] : kDetails) {
    const auto values = decode_detail_counters(attribute, data);
    FUZZ_CHECK(values.size() == count, "%zu values of attribute 0x%04x", values.size(),
               static_cast<unsigned>(attribute));
    for (std::size_t i = 0; i < values.size(); ++i) {
      FUZZ_CHECK(values[i].width == 16 &&
                     values[i].value == reference_bits(data, 32 + 16 * static_cast<int>(i), 16),
                 "%.*s decoded as %llu", static_cast<int>(values[i].counter.size()),
                 values[i].counter.data(), static_cast<unsigned long long>(values[i].value));
    }
  }
}

// PortExtendedSpeedsCounters: the block layout (16-bit counters at 128 and 144, per lane i
// ErrorDetection 160+16i/16, FEC corrected 352+32i/32 and uncorrectable 736+32i/32 blocks) and
// the RS-FEC one (corrected symbols 352+32i/32, port totals at 1120, 1152 and 1184).
void check_extended_speeds(std::span<const std::uint8_t> data) {
  const auto blocks = decode_extended_speeds_counters(data, FecLayout::kBlocks);
  const auto rs = decode_extended_speeds_counters(data, FecLayout::kRsFec);
  for (const auto* c : {&blocks, &rs}) {
    FUZZ_CHECK(c->sync_header_errors == reference_bits(data, 128, 16) &&
                   c->unknown_blocks == reference_bits(data, 144, 16),
               "sync header or unknown block counter misread");
  }
  for (std::size_t lane = 0; lane < kFecLanes; ++lane) {
    const int i = static_cast<int>(lane);
    FUZZ_CHECK(blocks.lane_error_detections[lane] == reference_bits(data, 160 + 16 * i, 16) &&
                   blocks.lane_corrected[lane] == reference_bits(data, 352 + 32 * i, 32) &&
                   blocks.lane_uncorrectable_blocks[lane] == reference_bits(data, 736 + 32 * i, 32),
               "lane %zu of the block layout misread", lane);
    FUZZ_CHECK(rs.lane_corrected[lane] == reference_bits(data, 352 + 32 * i, 32) &&
                   rs.lane_error_detections[lane] == 0 && rs.lane_uncorrectable_blocks[lane] == 0,
               "lane %zu of the RS-FEC layout misread", lane);
  }
  FUZZ_CHECK(rs.corrected_blocks == reference_bits(data, 1120, 32) &&
                 rs.uncorrectable_blocks == reference_bits(data, 1152, 32) &&
                 rs.corrected_symbols == reference_bits(data, 1184, 32),
             "RS-FEC port totals misread");
  FUZZ_CHECK(blocks.corrected_blocks == 0 && blocks.uncorrectable_blocks == 0 &&
                 blocks.corrected_symbols == 0,
             "port totals in the block layout");
  const auto mode = reference_bits(data, 32, 16);
  FUZZ_CHECK(
      rs_fec_active(data) == ((reference_bits(data, 31, 1) == 1) && (mode == 2 || mode == 4)),
      "PortInfoExtended RS-FEC misjudged");
}

void check_received(std::span<const std::uint8_t> mad) {
  const auto header = decode_header(mad);
  FUZZ_CHECK(header.has_value() == (mad.size() >= 24), "header of a %zu-byte MAD", mad.size());
  if (header) {
    FUZZ_CHECK(
        header->base_version == mad[0] && static_cast<std::uint8_t>(header->method) == mad[3],
        "version or method misread");
    FUZZ_CHECK(header->status == reference_be(mad, 4, 2), "status misread");
    FUZZ_CHECK(header->transaction_id == reference_be(mad, 8, 8), "transaction id misread");
    FUZZ_CHECK(static_cast<std::uint16_t>(header->attribute) == reference_be(mad, 16, 2),
               "attribute misread");
    FUZZ_CHECK(header->attribute_modifier == reference_be(mad, 20, 4), "modifier misread");
    const std::string status = describe_status(header->status);
    FUZZ_CHECK(status.starts_with("0x") && status.size() >= 6, "status text '%s'", status.c_str());
    (void)to_string(header->attribute);
  }

  const auto data = data_of(mad);
  FUZZ_CHECK(data.empty() == (mad.size() < kMadSize), "data area of a %zu-byte MAD", mad.size());
  if (data.empty()) return;
  FUZZ_CHECK(data.size() == kMadSize - kDataOffset && data.data() == mad.data() + kDataOffset,
             "data area is not bytes 64..255");

  const auto info = decode_class_port_info(data);
  FUZZ_CHECK(info.capability_mask == reference_bits(data, 16, 16), "capability mask misread");
  FUZZ_CHECK(info.capability_mask2 == reference_bits(data, 32, 27), "capability mask 2 misread");
  FUZZ_CHECK(info.resp_time_value == reference_bits(data, 59, 5), "resp time misread");
  const auto node = decode_node_info(data);
  FUZZ_CHECK(node.num_ports == data[3], "num ports misread");
  FUZZ_CHECK(node.node_guid == reference_bits(data, 96, 64), "node guid misread");
  FUZZ_CHECK(port_select_of(data) == data[1], "port select misread");
  check_counters(data, port_counters_fields());
  check_counters(data, port_counters_extended_fields());
  check_details(data);
  check_extended_speeds(data);

  // Any field position: offset and width from the MAD's own first bytes.
  const int width = 1 + mad[0] % 64;
  const int offset = (mad[1] << 8 | mad[2]) % (static_cast<int>(data.size()) * 8 - width + 1);
  FUZZ_CHECK(read_bits(data, offset, width) == reference_bits(data, offset, width),
             "read_bits(%d, %d)", offset, width);
}

void check_request(std::span<const std::uint8_t> input) {
  if (input.size() < 12) return;
  const Request request{
      .mgmt_class = input[0] & 1 ? MgmtClass::kPerfMgt : MgmtClass::kSubnLidRouted,
      .attribute = static_cast<Attribute>(input[1] << 8 | input[2]),
      .transaction_id = reference_be(input, 3, 8),
      .port_select = input[11],
      .attribute_modifier =
          input.size() >= 16 ? static_cast<std::uint32_t>(reference_be(input, 12, 4)) : 0,
  };
  const Mad mad = encode_get(request);
  const auto header = decode_header(mad);
  FUZZ_CHECK(header.has_value(), "encoded request has no header");
  FUZZ_CHECK(header->mgmt_class == request.mgmt_class && header->attribute == request.attribute &&
                 header->transaction_id == request.transaction_id &&
                 header->method == Method::kGet && header->base_version == kBaseVersion &&
                 header->class_version == kClassVersion && header->status == 0 &&
                 header->attribute_modifier == request.attribute_modifier,
             "encode_get/decode_header round trip");
  constexpr Attribute kPerPort[] = {
      Attribute::kPortCounters,           Attribute::kPortCountersExtended,
      Attribute::kPortRcvErrorDetails,    Attribute::kPortXmitDiscardDetails,
      Attribute::kPortVLXmitWaitCounters, Attribute::kPortExtendedSpeedsCounters};
  if (std::find(std::begin(kPerPort), std::end(kPerPort), request.attribute) !=
      std::end(kPerPort)) {
    FUZZ_CHECK(port_select_of(data_of(mad)) == request.port_select, "port select lost");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = ibprobe::fuzz::bytes(data, size);
  check_received(input);
  check_request(input);
  return 0;
}

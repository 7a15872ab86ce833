// Encoding and decoding of the management datagrams (MADs) the remote PMA collector exchanges:
// PerfMgt ClassPortInfo, PortCounters and PortCountersExtended, the optional detail attributes
// (PortRcvErrorDetails, PortXmitDiscardDetails, PortVLXmitWaitCounters), the FEC counters of
// PortExtendedSpeedsCounters, and the LID-routed SMPs NodeInfo (names the node, counts its ports)
// and PortInfoExtended (the FEC mode a port runs). Pure byte work, no I/O: field layouts per IBA
// vol. 1 (MAD common header 13.4.3, PerfMgt 16.1.3, NodeInfo 14.2.5.3), all big-endian.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::fabric::mad {

inline constexpr std::size_t kMadSize = 256;
// The 24-byte common header, then 40 reserved bytes (PerfMgt) or M_Key and 32 reserved bytes
// (LID-routed SMP): both classes put their attribute data at byte 64.
inline constexpr std::size_t kDataOffset = 64;

inline constexpr std::uint8_t kBaseVersion = 1;
inline constexpr std::uint8_t kClassVersion = 1;

enum class MgmtClass : std::uint8_t {
  kSubnLidRouted = 0x01,  // SMPs, answered by the node's SMA on QP0
  kPerfMgt = 0x04,        // answered by the port's PMA on QP1
};

enum class Method : std::uint8_t {
  kGet = 0x01,
  kGetResp = 0x81,
};

enum class Attribute : std::uint16_t {
  kClassPortInfo = 0x0001,
  kNodeInfo = 0x0011,
  kPortCounters = 0x0012,
  kPortRcvErrorDetails = 0x0015,
  kPortXmitDiscardDetails = 0x0016,
  kPortVLXmitWaitCounters = 0x001C,
  kPortCountersExtended = 0x001D,
  kPortExtendedSpeedsCounters = 0x001F,
  kPortInfoExtended = 0x0033,  // SMP; attribute modifier: the port
};
std::string_view to_string(Attribute attribute);

// The PerfMgt attributes about one port, whose data area starts with PortSelect.
bool is_per_port(Attribute attribute);

// PerfMgt attributes a PMA may lack: ClassPortInfo has no capability bit for them (IBA vol. 1
// 16.1.3; libibmad's IB_PM_* bits stop at QP1 drops), so a PMA tells by answering a Get with the
// status "method/attribute combination not supported".
inline constexpr std::array kDetailAttributes = {Attribute::kPortRcvErrorDetails,
                                                 Attribute::kPortXmitDiscardDetails,
                                                 Attribute::kPortVLXmitWaitCounters};

// Whether a MAD status says the attribute (or the Get of it) is not implemented.
bool is_unsupported_status(std::uint16_t status);

// PortSelect 0xFF asks for the sum over all ports (only with CapabilityMask AllPortSelect).
inline constexpr std::uint8_t kAllPorts = 0xFF;

// ClassPortInfo CapabilityMask bits of the PerfMgt class.
inline constexpr std::uint16_t kCapAllPortSelect = 1u << 8;
inline constexpr std::uint16_t kCapExtendedWidth = 1u << 9;
inline constexpr std::uint16_t kCapExtendedWidthNoIetf = 1u << 10;  // no unicast/multicast
inline constexpr std::uint16_t kCapPortXmitWait = 1u << 12;
// IsRSFECCountersSupported: on a port whose PortInfoExtended says RS-FEC is active, the PMA fills
// PortExtendedSpeedsCounters in its RS-FEC layout (libibmad IS_PM_RSFEC_COUNTERS_SUP; perfquery's
// is_rsfec_mode_active). PortExtendedSpeedsCounters itself has no capability bit.
inline constexpr std::uint16_t kCapRsFecCounters = 1u << 14;

using Mad = std::array<std::uint8_t, kMadSize>;

struct Request {
  MgmtClass mgmt_class;
  Attribute attribute;
  std::uint64_t transaction_id;
  std::uint8_t port_select = 0;  // per-port attributes only
  std::uint32_t attribute_modifier = 0;
};

// A Get of the request's attribute.
Mad encode_get(const Request& request);

struct Header {
  std::uint8_t base_version;
  MgmtClass mgmt_class;
  std::uint8_t class_version;
  Method method;
  std::uint16_t status;
  std::uint64_t transaction_id;
  Attribute attribute;
  std::uint32_t attribute_modifier;
};

// nullopt when fewer than 24 bytes arrived.
std::optional<Header> decode_header(std::span<const std::uint8_t> mad);

// The MAD status field in words, e.g. "0x000c (method/attribute combination not supported)".
std::string describe_status(std::uint16_t status);

// The attribute data area (bytes 64..255) of a whole MAD; empty when the MAD is truncated.
std::span<const std::uint8_t> data_of(std::span<const std::uint8_t> mad);

// `width` bits (at most 64) starting `bit_offset` bits into big-endian `data`.
std::uint64_t read_bits(std::span<const std::uint8_t> data, int bit_offset, int width);

struct ClassPortInfo {
  std::uint8_t base_version;
  std::uint8_t class_version;
  std::uint16_t capability_mask;
  std::uint32_t capability_mask2;  // 27 bits
  std::uint8_t resp_time_value;    // 5 bits: response time 4.096 us * 2^value
};
ClassPortInfo decode_class_port_info(std::span<const std::uint8_t> data);

// The two NodeInfo fields the collector uses.
struct NodeInfo {
  std::uint8_t num_ports;
  std::uint64_t node_guid;
};
NodeInfo decode_node_info(std::span<const std::uint8_t> data);

// One counter field of PortCounters or PortCountersExtended, named as the kernel names the
// same counter in ports/N/counters/, so both sources share one table of families.
struct CounterField {
  std::string_view counter;
  int bit_offset;
  int width;
};
struct CounterValue {
  std::string_view counter;
  std::uint64_t value;
  int width;
};

std::span<const CounterField> port_counters_fields();
std::span<const CounterField> port_counters_extended_fields();

// PortSelect of a per-port attribute's data area.
std::uint8_t port_select_of(std::span<const std::uint8_t> data);
std::vector<CounterValue> decode_counters(std::span<const std::uint8_t> data,
                                          std::span<const CounterField> fields);

// The counters of a detail attribute's data area, decoded with libibmad's field tables (as
// perfquery --rcverr, --xmtdisc and --vlxmitcounters print them). PortRcvErrorDetails and
// PortXmitDiscardDetails counters are named port_<field> in snake case
// (port_malformed_packet_errors, port_sw_lifetime_limit_discards, ...); PortVLXmitWaitCounters' are
// port_vl_xmit_wait_<vl>. Empty for any other attribute.
std::vector<CounterValue> decode_detail_counters(Attribute attribute,
                                                 std::span<const std::uint8_t> data);

// "port_vl_xmit_wait_<vl>" -> vl; nullopt for any other name.
std::optional<int> vl_of_xmit_wait(std::string_view counter);

// PortExtendedSpeedsCounters (0x1F) of one port, decoded with libibmad's IB_PESC_* tables in the
// layout perfquery --extended_speeds picks: the RS-FEC one when the PMA has kCapRsFecCounters and
// the port's PortInfoExtended says RS-FEC is active (rs_fec_active), the other one otherwise.
inline constexpr std::size_t kFecLanes = 12;
enum class FecLayout : std::uint8_t { kBlocks, kRsFec };
struct ExtendedSpeedsCounters {
  FecLayout layout = FecLayout::kBlocks;
  std::uint16_t sync_header_errors = 0;  // 16 bit
  std::uint16_t unknown_blocks = 0;      // 16 bit
  // kBlocks only, 16 bit: ErrorDetectionCounterLane, 64b/66b blocks with errors per lane.
  std::array<std::uint16_t, kFecLanes> lane_error_detections = {};
  // 32 bit. kBlocks: FECCorrectableBlockCtrLane; kRsFec: FECCorrectableSymbolCtrLane.
  std::array<std::uint32_t, kFecLanes> lane_corrected = {};
  // kBlocks only, 32 bit: FECUncorrectableBlockCtrLane.
  std::array<std::uint32_t, kFecLanes> lane_uncorrectable_blocks = {};
  // kRsFec only, 32 bit: PortFECCorrectableBlockCtr, PortFECUncorrectableBlockCtr,
  // PortFECCorrectedSymbolCtr.
  std::uint32_t corrected_blocks = 0;
  std::uint32_t uncorrectable_blocks = 0;
  std::uint32_t corrected_symbols = 0;
};
ExtendedSpeedsCounters decode_extended_speeds_counters(std::span<const std::uint8_t> data,
                                                       FecLayout layout);

// PortInfoExtended (SMP 0x33): whether the port runs RS-FEC in the sense perfquery's
// is_rsfec_mode_active takes it: CapabilityMask IsFECModeSupported (bit 0) and FECModeActive 2
// (RS-FEC) or 4 (RS-FEC2); Fire-Code (1), low-latency RS-FEC (3) and none (0) are not.
bool rs_fec_active(std::span<const std::uint8_t> port_info_extended);

}  // namespace ibprobe::fabric::mad

// Forward error correction below a port's counters: the active FEC mode and the corrected and
// uncorrectable codeword counts of an ETHTOOL_MSG_FEC_GET_REPLY (what `ethtool -I --show-fec`
// prints), decoded from the reply's netlink attributes. Pure byte work, no socket.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::collectors {

enum class FecErrorKind {
  kMalformedAttribute,  // an attribute header or length that runs past the bytes
  kBadPayloadLength,    // a payload whose length its type does not allow (a u32 not 4 bytes,
                        // a u64 array not a multiple of 8)
};
std::string_view to_string(FecErrorKind kind);

struct FecError {
  FecErrorKind kind;
  std::string message;  // names the attribute, its offset and its length
};

// One statistic: the total over the port, and per lane when the driver counts lanes.
struct FecCounter {
  std::uint64_t total = 0;
  std::vector<std::uint64_t> lanes;

  bool operator==(const FecCounter&) const = default;
};

// Drivers report a subset of the statistics (and only when the request carries
// ETHTOOL_FLAG_STATS); a statistic they do not report is absent.
struct FecStatistics {
  // As ethtool names the link mode: "Off", "RS", "BaseR", "LLRS", or "BIT<n>" for a mode this
  // build does not know. Absent when no FEC mode is active.
  std::optional<std::string> active_mode;
  std::optional<FecCounter> corrected_blocks;
  std::optional<FecCounter> uncorrectable_blocks;
  std::optional<FecCounter> corrected_bits;

  bool operator==(const FecStatistics&) const = default;
};

// A FEC statistic's families: the port's total and the per-lane one (labelled `lane`, from 0).
// Shared by the link_health collector (ethtool) and the fabric's PortExtendedSpeedsCounters of
// InfiniBand ports, so one set of BER rules covers both.
struct FecFamilies {
  std::string_view total;
  std::string_view lane;
  std::string_view help;
};
inline constexpr FecFamilies kFecCorrectedBlocks{
    "rdma_port_fec_corrected_blocks_total", "rdma_port_fec_lane_corrected_blocks_total",
    "FEC codewords (blocks) received with errors the FEC corrected."};
inline constexpr FecFamilies kFecUncorrectableBlocks{
    "rdma_port_fec_uncorrectable_blocks_total", "rdma_port_fec_lane_uncorrectable_blocks_total",
    "FEC codewords (blocks) received with more errors than the FEC corrects: frames lost."};
inline constexpr FecFamilies kFecCorrectedBits{
    "rdma_port_fec_corrected_bits_total", "rdma_port_fec_lane_corrected_bits_total",
    "Bits the FEC corrected: the bit errors of the line before FEC."};

// `attributes`: the reply's attributes, after its nlmsghdr and genlmsghdr. Attributes this
// decoder does not use (the header nest, the configured modes, ones a later kernel adds) are
// skipped; a malformed one is an error, wherever it is.
std::expected<FecStatistics, FecError> decode_fec_reply(std::span<const std::uint8_t> attributes);

}  // namespace ibprobe::collectors

// The FEC reply decoder over any attribute bytes a netlink socket can hand back. Checked: a
// decoded reply, laid out again the way the kernel writes one, decodes to itself; its arrays
// hold no more elements than the input has room for; an error carries words.
#include "ibprobe/fec_statistics.h"

#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/netlink.h>

#include <cstring>
#include <string>
#include <vector>

#include "fuzz.h"

namespace {

using namespace ibprobe::collectors;
using Bytes = std::vector<std::uint8_t>;

void put_attribute(Bytes& out, std::uint16_t type, const void* payload, std::size_t size) {
  const auto length = static_cast<std::uint16_t>(NLA_HDRLEN + size);
  const std::size_t at = out.size();
  out.resize(at + NLA_ALIGN(length), 0);
  std::memcpy(out.data() + at, &length, sizeof length);
  std::memcpy(out.data() + at + 2, &type, sizeof type);
  if (size > 0) std::memcpy(out.data() + at + NLA_HDRLEN, payload, size);
}

void put_counter(Bytes& out, std::uint16_t type, const std::optional<FecCounter>& counter) {
  if (!counter) return;
  std::vector<std::uint64_t> values{counter->total};
  values.insert(values.end(), counter->lanes.begin(), counter->lanes.end());
  put_attribute(out, type, values.data(), values.size() * sizeof(std::uint64_t));
}

// The active mode's link-mode bit, from the name the decoder gave it.
std::uint32_t mode_bit(const std::string& name) {
  if (name == "Off") return ETHTOOL_LINK_MODE_FEC_NONE_BIT;
  if (name == "RS") return ETHTOOL_LINK_MODE_FEC_RS_BIT;
  if (name == "BaseR") return ETHTOOL_LINK_MODE_FEC_BASER_BIT;
  if (name == "LLRS") return ETHTOOL_LINK_MODE_FEC_LLRS_BIT;
  FUZZ_CHECK(name.starts_with("BIT") && name.size() > 3, "active mode '%s'", name.c_str());
  return static_cast<std::uint32_t>(std::stoul(name.substr(3)));
}

Bytes encode(const FecStatistics& statistics) {
  Bytes out;
  if (statistics.active_mode) {
    const std::uint32_t bit = mode_bit(*statistics.active_mode);
    put_attribute(out, ETHTOOL_A_FEC_ACTIVE, &bit, sizeof bit);
  }
  Bytes nest;
  put_counter(nest, ETHTOOL_A_FEC_STAT_CORRECTED, statistics.corrected_blocks);
  put_counter(nest, ETHTOOL_A_FEC_STAT_UNCORR, statistics.uncorrectable_blocks);
  put_counter(nest, ETHTOOL_A_FEC_STAT_CORR_BITS, statistics.corrected_bits);
  put_attribute(out, ETHTOOL_A_FEC_STATS | NLA_F_NESTED, nest.data(), nest.size());
  return out;
}

void check_bounded(const std::optional<FecCounter>& counter, std::size_t input_size) {
  if (!counter) return;
  FUZZ_CHECK((1 + counter->lanes.size()) * sizeof(std::uint64_t) <= input_size,
             "%zu lanes from %zu bytes", counter->lanes.size(), input_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto decoded = decode_fec_reply(ibprobe::fuzz::bytes(data, size));
  if (!decoded) {
    FUZZ_CHECK(!decoded.error().message.empty(), "an error without words");
    (void)to_string(decoded.error().kind);
    return 0;
  }
  check_bounded(decoded->corrected_blocks, size);
  check_bounded(decoded->uncorrectable_blocks, size);
  check_bounded(decoded->corrected_bits, size);
  const Bytes again = encode(*decoded);
  const auto redecoded = decode_fec_reply(again);
  FUZZ_CHECK(redecoded && *redecoded == *decoded, "the reply laid out again decodes otherwise");
  return 0;
}

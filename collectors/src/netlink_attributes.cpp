#include "netlink_attributes.h"

#include <linux/netlink.h>

#include <algorithm>
#include <cstring>

namespace ibprobe::collectors::netlink {

std::expected<std::vector<Attribute>, MalformedAttribute> attributes_of(
    std::span<const std::uint8_t> bytes, std::size_t base) {
  std::vector<Attribute> attributes;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t remaining = bytes.size() - at;
    if (remaining < NLA_HDRLEN) {
      return std::unexpected(MalformedAttribute{
          base + at, std::to_string(remaining) + " bytes are too few for an attribute header"});
    }
    nlattr header;
    std::memcpy(&header, bytes.data() + at, sizeof header);
    if (header.nla_len < NLA_HDRLEN || header.nla_len > remaining) {
      return std::unexpected(
          MalformedAttribute{base + at, "the attribute declares " + std::to_string(header.nla_len) +
                                            " bytes, " + std::to_string(remaining) + " remain"});
    }
    attributes.push_back({.type = static_cast<std::uint16_t>(header.nla_type & NLA_TYPE_MASK),
                          .offset = base + at,
                          .payload = bytes.subspan(at + NLA_HDRLEN, header.nla_len - NLA_HDRLEN)});
    at = std::min<std::size_t>(at + NLA_ALIGN(header.nla_len), bytes.size());
  }
  return attributes;
}

void put_attribute(std::vector<std::uint8_t>& out, std::uint16_t type,
                   std::span<const std::uint8_t> payload) {
  const nlattr header{.nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + payload.size()),
                      .nla_type = type};
  const std::size_t at = out.size();
  out.resize(at + NLA_ALIGN(header.nla_len), 0);
  std::memcpy(out.data() + at, &header, sizeof header);
  std::copy(payload.begin(), payload.end(),
            out.begin() + static_cast<std::ptrdiff_t>(at + NLA_HDRLEN));
}

void put_string(std::vector<std::uint8_t>& out, std::uint16_t type, std::string_view text) {
  std::vector<std::uint8_t> terminated(text.begin(), text.end());
  terminated.push_back(0);
  put_attribute(out, type, terminated);
}

}  // namespace ibprobe::collectors::netlink

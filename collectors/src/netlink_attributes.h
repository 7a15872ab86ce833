// Netlink attributes (struct nlattr, <linux/netlink.h>) read and written: a 16-bit length that
// counts the 4-byte header, a 16-bit type whose top two bits are flags, the payload, padding to
// four bytes. Lengths and values are in host byte order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ibprobe::collectors::netlink {

struct Attribute {
  std::uint16_t type;  // NLA_F_NESTED and NLA_F_NET_BYTEORDER masked off
  std::size_t offset;  // of its header, counted as the caller counts (see attributes_of)
  std::span<const std::uint8_t> payload;
};

struct MalformedAttribute {
  std::size_t offset;
  std::string reason;
};

// Every attribute of `bytes`, in order; their offsets count from `base` (a nest's payload
// offset, to name where a nested attribute sits in the message). The last attribute's padding
// may be cut off with the message.
std::expected<std::vector<Attribute>, MalformedAttribute> attributes_of(
    std::span<const std::uint8_t> bytes, std::size_t base = 0);

// Appends one attribute, padded.
void put_attribute(std::vector<std::uint8_t>& out, std::uint16_t type,
                   std::span<const std::uint8_t> payload);
void put_string(std::vector<std::uint8_t>& out, std::uint16_t type, std::string_view text);

template <typename T>
void put_value(std::vector<std::uint8_t>& out, std::uint16_t type, T value) {
  put_attribute(out, type, {reinterpret_cast<const std::uint8_t*>(&value), sizeof value});
}

}  // namespace ibprobe::collectors::netlink

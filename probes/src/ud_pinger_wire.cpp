#include "ud_pinger_wire.h"

#include <endian.h>

#include <cstring>

namespace ibprobe::probes::ud_wire {
namespace {

constexpr std::uint32_t kMagic = 0x49424d50;  // "IBMP"

template <typename T>
void put(std::uint8_t* at, T big_endian) {
  std::memcpy(at, &big_endian, sizeof(big_endian));
}

template <typename T>
T get(const std::uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

}  // namespace

void encode(const Message& message, std::span<std::uint8_t, kMessageBytes> out) {
  std::memset(out.data(), 0, out.size());
  put(out.data(), htobe32(kMagic));
  out[4] = static_cast<std::uint8_t>(message.kind);
  out[5] = message.flags;
  put(out.data() + 8, htobe64(message.token));
  put(out.data() + 16, htobe64(message.turnaround_ns));
}

std::optional<Message> decode(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < kMessageBytes || be32toh(get<std::uint32_t>(bytes.data())) != kMagic) {
    return std::nullopt;
  }
  return Message{static_cast<Kind>(bytes[4]), bytes[5],
                 be64toh(get<std::uint64_t>(bytes.data() + 8)),
                 be64toh(get<std::uint64_t>(bytes.data() + 16))};
}

}  // namespace ibprobe::probes::ud_wire

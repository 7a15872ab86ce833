// A peer's IP address as resolved once: what an allowlist checked is what a run connects to.
#pragma once

#include <array>
#include <cstdint>

namespace ibprobe::probes {

// 16 bytes, an IPv4 address kept IPv4-mapped (::ffff:a.b.c.d), so one form serves both families.
using IpAddress = std::array<std::uint8_t, 16>;

}  // namespace ibprobe::probes

// A peer's IP address as resolved once: what an allowlist checked is what a run connects to.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace ibprobe::probes {

// 16 bytes, an IPv4 address kept IPv4-mapped (::ffff:a.b.c.d), so one form serves both families.
using IpAddress = std::array<std::uint8_t, 16>;

// A host's addresses as a name lookup gave them, or why the lookup failed.
using Resolution = std::expected<std::vector<IpAddress>, std::string>;

}  // namespace ibprobe::probes

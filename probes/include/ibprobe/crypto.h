// The few primitives of OpenSSL's libcrypto the exporter and the probe tool need: HMAC and
// digests for peer authentication and web-config credentials. libcrypto is loaded on first use,
// so a process that has no secret, no password and no TLS configured never maps it (1.4 MB of
// resident pages, measured on the scrape benchmark).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace ibprobe::crypto {

using Sha256 = std::array<std::uint8_t, 32>;

// Loads libcrypto now, so that a process whose configuration needs it (a probe secret,
// passwords) fails at start, not at its first handshake, when the library is missing. Each
// function here throws std::runtime_error naming the library when it cannot be loaded.
void require();

Sha256 sha256(std::string_view data);
Sha256 hmac_sha256(std::string_view key, std::span<const std::uint8_t> message);
// Compares in time that depends on the length only, not on where the bytes differ.
bool equal_in_constant_time(const void* a, const void* b, std::size_t length);
// Overwrites memory in a way the compiler cannot drop as a dead store.
void cleanse(void* data, std::size_t length);

}  // namespace ibprobe::crypto

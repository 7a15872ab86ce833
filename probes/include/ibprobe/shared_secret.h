// The secret that authenticates probe peers to each other, read from a file that both the
// exporter (--probe.secret-file) and ibprobe_probe (--secret-file) name.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace ibprobe::probes {

// 128 bits: out of reach of guessing over a connection that costs a round trip per guess.
inline constexpr std::size_t kMinSecretBytes = 16;
inline constexpr std::size_t kMaxSecretBytes = 4096;

// The secret in `path`, one trailing newline removed. Throws std::invalid_argument saying why
// the file cannot serve as a secret (missing, unreadable, empty, shorter than kMinSecretBytes).
std::string load_shared_secret(const std::filesystem::path& path);

}  // namespace ibprobe::probes

// Self-checking probe messages and work-request ids for validating probes.
//
// A validating message is laid out as
//   header (32 bytes) | pseudo-random payload | trailer (8 bytes: the sequence number again,
//   masked with a constant so that zeroed memory is not the trailer of message 0)
// with the header, little endian:
//   magic u32 @0 | QP index u16 @4 | connection generation u16 @6 | sequence u64 @8 |
//   message length u32 @16 | reserved u32 @20 | checksum u64 @24
// The payload is a function of (QP index, generation, sequence), so a receiver that finds a
// checksum mismatch can regenerate what should have arrived and name the first offending byte.
// Pseudo-random rather than constant data: a shifted, swapped or stale block of all-zero data
// looks exactly like the right one. The trailer lands last when a write is placed in order, so a
// receiver polling a slot sees a whole message once header and trailer agree.
//
// A work-request id packs the QP index (bits 0-15), the connection generation (16-31) and a
// sequence number (32-63). Non-validating loops use the bare QP index, which decodes the same.
// The generation is new for every connection this process makes, so a completion that belongs
// to an earlier connection is recognised and dropped instead of being counted against this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace ibprobe::probes::payload {

inline constexpr std::uint32_t kMagic = 0x44565049;  // "IPVD" in memory order
inline constexpr std::size_t kHeaderBytes = 32;
inline constexpr std::size_t kTrailerBytes = 8;
// Header, trailer and at least three payload words.
inline constexpr std::uint64_t kMinMessageBytes = 64;

struct Header {
  std::uint32_t magic = 0;
  std::uint16_t qp = 0;
  std::uint16_t generation = 0;
  std::uint64_t sequence = 0;
  std::uint32_t length = 0;
  std::uint64_t checksum = 0;

  bool operator==(const Header&) const = default;
};

// Writes a complete message for (qp, generation, sequence) over all of `message` (at least
// kMinMessageBytes) and returns its checksum.
std::uint64_t fill(std::span<std::uint8_t> message, std::uint16_t qp, std::uint16_t generation,
                   std::uint64_t sequence);

// The checksum over the header's fields other than the checksum itself and over the payload.
std::uint64_t checksum(std::span<const std::uint8_t> message);

Header read_header(std::span<const std::uint8_t> message);
// The sequence number the trailer repeats.
std::uint64_t read_trailer(std::span<const std::uint8_t> message);

// What a receiver found in one message. For kCorrupt, `offset` and the two bytes name the first
// payload byte that differs from the payload regenerated from the header; offset 0 when the
// payload is intact and the header or checksum field was hit. Most of the payload differing
// means the header itself is wrong (or the data belongs to another message).
struct Finding {
  enum class Kind { kOk, kBadMagic, kBadLength, kTornTrailer, kCorrupt };
  Kind kind = Kind::kOk;
  Header header;
  std::size_t offset = 0;
  std::uint8_t expected = 0;
  std::uint8_t actual = 0;
  std::size_t mismatched = 0;  // payload bytes that differ from what the header describes

  bool ok() const { return kind == Kind::kOk; }
  // One line for a log: what is wrong, where, and the bytes involved.
  std::string describe() const;
};

// Checks magic, length (against the bytes that arrived), trailer and checksum.
Finding verify(std::span<const std::uint8_t> message);

// Test-only fault: the byte a corrupted message has flipped, inside the payload, after the
// checksum was computed. Deterministic so a test can predict it.
std::size_t fault_offset(std::size_t message_bytes, std::uint64_t sequence);
void flip_byte_after_checksum(std::span<std::uint8_t> message, std::uint64_t sequence);

struct WorkId {
  std::uint16_t qp = 0;
  std::uint16_t generation = 0;
  std::uint32_t sequence = 0;

  bool operator==(const WorkId&) const = default;
};

std::uint64_t encode_wr_id(const WorkId& id);
WorkId decode_wr_id(std::uint64_t wr_id);

// A generation for a new connection: different from the last 65535 this process handed out,
// never 0 (the bare QP-index ids of non-validating loops carry 0).
std::uint16_t next_generation();

}  // namespace ibprobe::probes::payload

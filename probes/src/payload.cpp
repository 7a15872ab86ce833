#include "payload.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace ibprobe::probes::payload {
namespace {

constexpr std::size_t kMagicAt = 0, kQpAt = 4, kGenerationAt = 6, kSequenceAt = 8, kLengthAt = 16,
                      kChecksumAt = 24;
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
// The trailer is the sequence number masked, so that zeroed memory is no trailer of message 0.
constexpr std::uint64_t kTrailerMask = 0x5452'4149'4c45'5221ull;

template <typename T>
T load(const std::uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

template <typename T>
void store(std::uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof(value));
}

// splitmix64's output function: word i of a payload is mix(seed + i * golden), so any word can
// be regenerated on its own.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t seed_of(std::uint16_t qp, std::uint16_t generation, std::uint64_t sequence) {
  return mix(sequence ^ (static_cast<std::uint64_t>(qp) << 48) ^
             (static_cast<std::uint64_t>(generation) << 32) ^ 0x6a09e667f3bcc908ull);
}

std::uint64_t rotl(std::uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

// Every step is a bijection of the state for a fixed word, so a message that differs in exactly
// one word always changes the result.
struct Hasher {
  std::uint64_t state = 0x243f6a8885a308d3ull;
  void add(std::uint64_t word) {
    state ^= word * kGolden;
    state = rotl(state, 27) * 0x87c37b91114253d5ull + 0x52dce729ull;
  }
  std::uint64_t finish(std::uint64_t length) {
    add(length);
    return mix(state);
  }
};

std::span<const std::uint8_t> payload_of(std::span<const std::uint8_t> message) {
  return message.subspan(kHeaderBytes, message.size() - kHeaderBytes - kTrailerBytes);
}

// The payload's words in order; the last one padded with zero bytes when the length is not a
// multiple of 8.
template <typename Visit>
void for_each_word(std::span<const std::uint8_t> bytes, Visit&& visit) {
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) visit(load<std::uint64_t>(bytes.data() + i));
  if (i < bytes.size()) {
    std::uint64_t last = 0;
    std::memcpy(&last, bytes.data() + i, bytes.size() - i);
    visit(last);
  }
}

std::uint8_t expected_payload_byte(const Header& header, std::size_t payload_offset) {
  const std::uint64_t word =
      mix(seed_of(header.qp, header.generation, header.sequence) + (payload_offset / 8) * kGolden);
  return static_cast<std::uint8_t>(word >> (8 * (payload_offset % 8)));
}

}  // namespace

std::uint64_t checksum(std::span<const std::uint8_t> message) {
  Hasher hasher;
  for_each_word(message.first(kChecksumAt), [&](std::uint64_t w) { hasher.add(w); });
  for_each_word(payload_of(message), [&](std::uint64_t w) { hasher.add(w); });
  return hasher.finish(message.size());
}

std::uint64_t fill(std::span<std::uint8_t> message, std::uint16_t qp, std::uint16_t generation,
                   std::uint64_t sequence) {
  std::uint8_t* base = message.data();
  store<std::uint32_t>(base + kMagicAt, kMagic);
  store<std::uint16_t>(base + kQpAt, qp);
  store<std::uint16_t>(base + kGenerationAt, generation);
  store<std::uint64_t>(base + kSequenceAt, sequence);
  store<std::uint32_t>(base + kLengthAt, static_cast<std::uint32_t>(message.size()));
  store<std::uint32_t>(base + kLengthAt + 4, 0);
  // Payload and checksum in one pass over the data.
  Hasher hasher;
  for_each_word(std::span<const std::uint8_t>(base, kChecksumAt),
                [&](std::uint64_t w) { hasher.add(w); });
  const std::uint64_t seed = seed_of(qp, generation, sequence);
  const std::size_t length = message.size() - kHeaderBytes - kTrailerBytes;
  std::uint8_t* payload = base + kHeaderBytes;
  std::size_t i = 0;
  for (std::uint64_t word_index = 0; i + 8 <= length; i += 8, ++word_index) {
    const std::uint64_t word = mix(seed + word_index * kGolden);
    store<std::uint64_t>(payload + i, word);
    hasher.add(word);
  }
  if (i < length) {
    const std::uint64_t word = mix(seed + (i / 8) * kGolden);
    std::uint64_t padded = 0;
    std::memcpy(payload + i, &word, length - i);
    std::memcpy(&padded, &word, length - i);
    hasher.add(padded);
  }
  const std::uint64_t sum = hasher.finish(message.size());
  store<std::uint64_t>(base + kChecksumAt, sum);
  store<std::uint64_t>(base + message.size() - kTrailerBytes, sequence ^ kTrailerMask);
  return sum;
}

Header read_header(std::span<const std::uint8_t> message) {
  const std::uint8_t* base = message.data();
  Header header;
  header.magic = load<std::uint32_t>(base + kMagicAt);
  header.qp = load<std::uint16_t>(base + kQpAt);
  header.generation = load<std::uint16_t>(base + kGenerationAt);
  header.sequence = load<std::uint64_t>(base + kSequenceAt);
  header.length = load<std::uint32_t>(base + kLengthAt);
  header.checksum = load<std::uint64_t>(base + kChecksumAt);
  return header;
}

std::uint64_t read_trailer(std::span<const std::uint8_t> message) {
  return load<std::uint64_t>(message.data() + message.size() - kTrailerBytes) ^ kTrailerMask;
}

Finding verify(std::span<const std::uint8_t> message) {
  Finding finding;
  if (message.size() < kMinMessageBytes) {
    finding.kind = Finding::Kind::kBadLength;
    return finding;
  }
  finding.header = read_header(message);
  const Header& h = finding.header;
  if (h.magic != kMagic) {
    finding.kind = Finding::Kind::kBadMagic;
  } else if (h.length != message.size()) {
    finding.kind = Finding::Kind::kBadLength;
  } else if (read_trailer(message) != h.sequence) {
    finding.kind = Finding::Kind::kTornTrailer;
    finding.offset = message.size() - kTrailerBytes;
  } else if (checksum(message) != h.checksum) {
    finding.kind = Finding::Kind::kCorrupt;
    const auto payload = payload_of(message);
    for (std::size_t i = 0; i < payload.size(); ++i) {
      const std::uint8_t expected = expected_payload_byte(h, i);
      if (payload[i] == expected) continue;
      if (finding.mismatched++ == 0) {
        finding.offset = kHeaderBytes + i;
        finding.expected = expected;
        finding.actual = payload[i];
      }
    }
    if (finding.mismatched > 0) return finding;
    // The payload is what it should be: the header or its checksum was hit.
    finding.offset = 0;
  }
  return finding;
}

std::string Finding::describe() const {
  char text[256];
  const auto seq = static_cast<unsigned long long>(header.sequence);
  switch (kind) {
    case Kind::kOk:
      std::snprintf(text, sizeof(text), "message qp=%u seq=%llu verified", header.qp, seq);
      break;
    case Kind::kBadMagic:
      std::snprintf(text, sizeof(text), "no message header (magic 0x%08x, expected 0x%08x)",
                    header.magic, kMagic);
      break;
    case Kind::kBadLength:
      std::snprintf(text, sizeof(text), "message qp=%u seq=%llu: header says %u bytes", header.qp,
                    seq, header.length);
      break;
    case Kind::kTornTrailer:
      std::snprintf(text, sizeof(text),
                    "message qp=%u seq=%llu: trailer at offset %zu does not repeat the sequence",
                    header.qp, seq, offset);
      break;
    case Kind::kCorrupt:
      if (offset >= kHeaderBytes && 2 * mismatched > header.length) {
        std::snprintf(text, sizeof(text),
                      "message qp=%u seq=%llu: checksum mismatch, the payload is not the one its "
                      "header describes (%zu bytes differ from offset %zu: header damaged, or "
                      "stale or misplaced data)",
                      header.qp, seq, mismatched, offset);
      } else if (offset >= kHeaderBytes) {
        std::snprintf(text, sizeof(text),
                      "message qp=%u seq=%llu: checksum mismatch, first bad byte at offset %zu: "
                      "expected 0x%02x, got 0x%02x (%zu bytes differ)",
                      header.qp, seq, offset, expected, actual, mismatched);
      } else {
        std::snprintf(text, sizeof(text),
                      "message qp=%u seq=%llu: checksum mismatch with an intact payload (header "
                      "or checksum field damaged)",
                      header.qp, seq);
      }
      break;
  }
  return text;
}

std::size_t fault_offset(std::size_t message_bytes, std::uint64_t sequence) {
  const std::size_t payload = message_bytes - kHeaderBytes - kTrailerBytes;
  return kHeaderBytes + static_cast<std::size_t>(mix(sequence) % payload);
}

void flip_byte_after_checksum(std::span<std::uint8_t> message, std::uint64_t sequence) {
  message[fault_offset(message.size(), sequence)] ^= 0xff;
}

std::uint64_t encode_wr_id(const WorkId& id) {
  return static_cast<std::uint64_t>(id.qp) | (static_cast<std::uint64_t>(id.generation) << 16) |
         (static_cast<std::uint64_t>(id.sequence) << 32);
}

WorkId decode_wr_id(std::uint64_t wr_id) {
  return WorkId{static_cast<std::uint16_t>(wr_id & 0xffff),
                static_cast<std::uint16_t>((wr_id >> 16) & 0xffff),
                static_cast<std::uint32_t>(wr_id >> 32)};
}

std::uint16_t next_generation() {
  static std::atomic<std::uint16_t> last{0};
  std::uint16_t generation = 0;
  while (generation == 0) generation = ++last;
  return generation;
}

}  // namespace ibprobe::probes::payload

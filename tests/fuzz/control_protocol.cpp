// The control protocol decoder: every byte string a peer can send. A frame that decodes must
// re-encode to a frame that decodes to the same message, and the encoder's own output must be a
// fixed point; the two-step decode (header, then body) must agree with the one-step decode; and
// what a hostile peer gets through decode goes on into the code that consumes it (validate_within,
// the responder's check of a spec, counter deltas and the link reading for a Result).
#include <cmath>
#include <expected>
#include <stdexcept>
#include <variant>

#include "fuzz.h"
#include "ibprobe/probes.h"
#include "protocol.h"

namespace {

using namespace ibprobe::probes;
using namespace ibprobe::probes::protocol;

bool same_error(const DecodeError& a, const DecodeError& b) {
  return a.kind == b.kind && a.message == b.message;
}

void check_two_step_decode(std::span<const std::uint8_t> frame,
                           const std::expected<Message, DecodeError>& whole) {
  const auto header = decode_header(frame);
  if (!header) {
    FUZZ_CHECK(!whole && same_error(header.error(), whole.error()),
               "header error '%s' but decode() said otherwise", header.error().message.c_str());
    return;
  }
  FUZZ_CHECK(header->body_length <= kMaxBodyBytes, "body_length %u over the limit",
             header->body_length);
  const auto body = decode_body(*header, frame.subspan(kHeaderSize));
  if (body) {
    FUZZ_CHECK(whole && *whole == *body, "two-step decode differs");
    FUZZ_CHECK(static_cast<std::size_t>(header->type) == body->index() + 1,
               "header type %u decoded as alternative %zu", static_cast<unsigned>(header->type),
               body->index());
  } else {
    FUZZ_CHECK(!whole && same_error(body.error(), whole.error()), "two-step decode error differs");
  }
}

// Bounds the protocol promises for every decoded message (protocol.h).
void check_bounds(const Message& message) {
  if (const auto* info = std::get_if<QpInfo>(&message)) {
    for (const auto& qp : info->qps) {
      FUZZ_CHECK(qp.qpn <= 0xFFFFFF && qp.psn <= 0xFFFFFF, "qpn %u psn %u over 24 bits", qp.qpn,
                 qp.psn);
      FUZZ_CHECK(is_ib_mtu(qp.mtu), "mtu %u", qp.mtu);
    }
  }
  if (const auto* hello = std::get_if<Hello>(&message)) {
    FUZZ_CHECK(hello->protocol_version == kProtocolVersion, "hello version %u",
               hello->protocol_version);
  }
  if (const auto* result = std::get_if<Result>(&message)) {
    for (const auto* snapshot : {&result->before, &result->after}) {
      for (const auto& [name, sample] : *snapshot) {
        FUZZ_CHECK(!name.empty(), "empty counter name");
        FUZZ_CHECK(sample.width_bits >= 1 && sample.width_bits <= 64, "width %u",
                   sample.width_bits);
        FUZZ_CHECK(std::isfinite(sample.scale) && sample.scale > 0, "scale %g", sample.scale);
      }
    }
  }
}

// What the peer's message feeds downstream must hold up to any decoded value.
void consume(const Message& message) {
  if (const auto* request = std::get_if<ProbeRequest>(&message)) {
    (void)validate_within(request->spec, Limits{});
  }
  if (const auto* result = std::get_if<Result>(&message)) {
    const auto deltas = counter_deltas(result->before, result->after);
    for (const auto& delta : deltas) {
      FUZZ_CHECK(delta.delta.has_value() == (delta.status == DeltaStatus::kValid),
                 "%s: delta present without kValid, or missing with it", delta.counter.c_str());
      if (delta.delta) {
        FUZZ_CHECK(std::isfinite(*delta.delta) && *delta.delta >= 0, "%s: delta %g",
                   delta.counter.c_str(), *delta.delta);
      }
    }
    (void)read_link(1.0, 1e9, 12.5e9, deltas, deltas);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto frame = ibprobe::fuzz::bytes(data, size);
  const auto decoded = decode(frame);
  check_two_step_decode(frame, decoded);
  if (!decoded) return 0;
  const Message* message = &*decoded;
  check_bounds(*message);
  consume(*message);

  Bytes encoded;
  try {
    encoded = encode(*message);
  } catch (const std::length_error&) {
    // The encoder writes numbers in a canonical form ("scale": 1 becomes 1.0) that can be a
    // little longer than what the peer sent, so a frame near the size limit may not re-encode.
    FUZZ_CHECK(size > kHeaderSize + kMaxBodyBytes * 9 / 10, "a %zu-byte frame failed to re-encode",
               size);
    return 0;
  }
  const auto again = decode(encoded);
  FUZZ_CHECK(again.has_value(), "re-encoded frame does not decode: %s",
             again.error().message.c_str());
  FUZZ_CHECK(*again == *message, "round trip changed the message (alternative %zu)",
             message->index());
  FUZZ_CHECK(encode(*again) == encoded, "encoding is not a fixed point");
  return 0;
}

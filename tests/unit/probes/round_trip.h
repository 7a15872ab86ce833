// For tests of the wire form: a message through the encoder and back.
#pragma once

#include <gtest/gtest.h>

#include "protocol.h"

namespace ibprobe::probes::protocol {

// What the decoder makes of `message` encoded; on a decode error, a test failure and `message`.
inline Message round_trip(const Message& message) {
  const auto decoded = decode(encode(message));
  if (!decoded) {
    ADD_FAILURE() << decoded.error().message;
    return message;
  }
  return *decoded;
}

}  // namespace ibprobe::probes::protocol

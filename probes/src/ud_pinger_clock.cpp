#include "ibprobe/ud_pinger_clock.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

namespace ibprobe::probes {
namespace {

std::string hex(std::uint64_t value) {
  char digits[16];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value, 16).ptr;
  return "0x" + std::string(digits, end);
}

}  // namespace

std::uint64_t ticks_between(std::uint64_t earlier, std::uint64_t later, std::uint64_t mask) {
  // Unsigned subtraction wraps modulo 2^64; the mask folds that onto the counter's own width.
  return (later - earlier) & mask;
}

std::chrono::nanoseconds ticks_to_ns(std::uint64_t ticks, std::uint64_t khz) {
  // ticks * 10^6 / khz, split so the product cannot overflow: a 63-bit mlx5 counter at 1 GHz
  // reaches 2^64 / 10^6 ticks in under six hours.
  constexpr std::uint64_t kNsPerMs = 1'000'000;
  const std::uint64_t whole_ms = ticks / khz;
  constexpr auto kMaxMs =
      static_cast<std::uint64_t>(std::numeric_limits<std::chrono::nanoseconds::rep>::max()) /
      kNsPerMs;
  if (whole_ms >= kMaxMs) return std::chrono::nanoseconds::max();
  const std::uint64_t rest_ns = (ticks % khz) * kNsPerMs / khz;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(whole_ms * kNsPerMs + rest_ns));
}

std::optional<std::chrono::nanoseconds> network_rtt(std::chrono::nanoseconds round_trip,
                                                    std::chrono::nanoseconds turnaround) {
  if (turnaround > round_trip) return std::nullopt;
  return round_trip - turnaround;
}

ClockChoice choose_clock(const std::string& device, const DeviceClockFacts& facts) {
  std::vector<std::string> against;
  const auto mask = facts.completion_timestamp_mask;
  const auto khz = facts.hca_core_clock_khz;
  if (facts.query_error != 0) {
    against.push_back("ibv_query_device_ex failed (" +
                      std::string(std::strerror(facts.query_error)) + ")");
  } else {
    if (mask == 0) {
      against.push_back("completion_timestamp_mask 0");
    } else if ((mask & (mask + 1)) != 0) {
      against.push_back("completion_timestamp_mask " + hex(mask) + " is not a run of low bits");
    }
    if (khz == 0) against.push_back("hca_core_clock 0 kHz");
    if (against.empty() && ticks_to_ns(mask, khz) < kLongestDeviceInterval) {
      against.push_back("the counter wraps every " +
                        std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(
                                           ticks_to_ns(mask, khz))
                                           .count()) +
                        " us, sooner than the longest interval timed on it");
    }
  }
  if (facts.timestamp_cq_error != 0) {
    against.push_back("ibv_create_cq_ex with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP failed (" +
                      std::string(std::strerror(facts.timestamp_cq_error)) + ")");
  }
  if (against.empty()) {
    return {true, device + ": completion timestamps (completion_timestamp_mask " + hex(mask) +
                      ", hca_core_clock " + std::to_string(khz) +
                      " kHz); device clock with peers that send follow-ups, host clock otherwise"};
  }
  std::string reasons;
  for (const auto& reason : against) reasons += (reasons.empty() ? "" : "; ") + reason;
  return {false, device + ": no device clock (" + reasons + "); host clock"};
}

}  // namespace ibprobe::probes

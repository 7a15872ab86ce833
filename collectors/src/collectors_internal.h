// Pieces shared between collectors and exposed to the unit tests.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ibprobe/collectors.h"

namespace ibprobe::collectors {

std::unique_ptr<Collector> make_port_counters_collector();
std::unique_ptr<Collector> make_hw_counters_collector();
std::unique_ptr<Collector> make_port_info_collector();

// hw_counters names are free text (hfi1 uses spaces and commas): keep letters and digits, fold
// every other run of characters into one underscore.
std::string sanitize_counter_name(std::string_view name);

// ports/N/rate, e.g. "200 Gb/sec (4X HDR)": the kernel's aggregate signalling rate.
struct PortRate {
  double gigabits_per_second = 0;
  int lanes = 0;      // 0 when the kernel printed no width
  std::string speed;  // "HDR", "EDR", ...; empty when absent
};
std::optional<PortRate> parse_rate(std::string_view text);

// "4: ACTIVE" / "5: LinkUp" -> 4 / 5.
std::optional<int> parse_enum_prefix(std::string_view text);

// "0x1a" (lid, sm_lid) -> 26.
std::optional<unsigned> parse_hex(std::string_view text);

}  // namespace ibprobe::collectors

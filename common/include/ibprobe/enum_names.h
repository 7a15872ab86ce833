// An enum's names as one table, read both ways: value to name for the metrics and the logs,
// name to value for configuration, flags and the wire. One table per enum keeps the two
// directions from drifting apart, which two hand-written switches did.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ibprobe {

template <typename Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

template <typename Enum, std::size_t N>
using EnumNames = std::array<EnumName<Enum>, N>;

// The name of `value`, or `fallback` for a value the table lacks (a cast from a corrupt integer).
template <typename Enum, std::size_t N>
constexpr std::string_view name_of(const EnumNames<Enum, N>& table, Enum value,
                                   std::string_view fallback = "unknown") {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return fallback;
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> value_named(const EnumNames<Enum, N>& table, std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// "a, b, c": the accepted names, for an error message that says what would have been accepted.
template <typename Enum, std::size_t N>
std::string names_listed(const EnumNames<Enum, N>& table) {
  std::string listed;
  for (const auto& entry : table) {
    if (!listed.empty()) listed += ", ";
    listed += entry.name;
  }
  return listed;
}

}  // namespace ibprobe

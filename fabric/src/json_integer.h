// Integers read from JSON the fabric library wrote itself (a discovery child's result, a saved
// state), checked: nlohmann converts a number that does not fit its type (1e300 into an int)
// without a word, which is undefined behaviour, and a hostile or corrupt file must not get there.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

namespace ibprobe::fabric {

// `object[key]` as an Integer; std::out_of_range when missing (nlohmann's at()),
// std::runtime_error when it is not an integer or does not fit.
template <typename Integer>
Integer json_integer(const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = object.at(key);
  if (value.is_number_unsigned()) {
    if (const auto number = value.get<std::uint64_t>(); std::in_range<Integer>(number)) {
      return static_cast<Integer>(number);
    }
  } else if (value.is_number_integer()) {
    if (const auto number = value.get<std::int64_t>(); std::in_range<Integer>(number)) {
      return static_cast<Integer>(number);
    }
  }
  throw std::runtime_error(std::string("\"") + key + "\" is not an integer in range");
}

}  // namespace ibprobe::fabric

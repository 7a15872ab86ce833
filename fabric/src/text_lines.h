// The line-by-line reading of the fabric's text inputs (the node-name-map, the cabling plan), so
// that every refusal can name its line.
#pragma once

#include <expected>
#include <string_view>

#include "ibprobe/fabric_error.h"

namespace ibprobe::fabric {

// Calls visit(number, line) for each line of `text`, numbered from 1, without its '\n' and the
// '\r' of a CRLF file; stops at the first error visit returns and returns it.
template <typename Visit>
std::expected<void, Error> for_each_line(std::string_view text, Visit&& visit) {
  int number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (auto done = visit(number, line); !done) return done;
  }
  return {};
}

}  // namespace ibprobe::fabric

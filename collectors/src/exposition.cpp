#include "ibprobe/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ibprobe::collectors::exposition {

// prometheus-cpp 1.0 prints values with the stream precision max_digits10 - 1 in the default
// float field, which is printf's %.16g; NaN and the infinities are spelled its way.
void append_value(std::string& out, double value) {
  // Counters are whole numbers: below 10^16 %.16g writes them as plain integers, which
  // to_chars writes several times faster for an integer than for a double.
  if (value == std::trunc(value) && std::fabs(value) < 1e16 && !std::signbit(value)) {
    char buffer[24];
    const auto result =
        std::to_chars(buffer, buffer + sizeof buffer, static_cast<std::int64_t>(value));
    out.append(buffer, result.ptr);
    return;
  }
  if (std::isnan(value)) {
    out += "Nan";
  } else if (std::isinf(value)) {
    out += value < 0 ? "-Inf" : "+Inf";
  } else {
    char buffer[32];
    const auto result =
        std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general,
                      std::numeric_limits<double>::max_digits10 - 1);
    out.append(buffer, result.ptr);
  }
}

namespace {

// Whether any byte of `value` is a backslash, a double quote or a newline, eight bytes at a time
// (a zero byte of word ^ broadcast(c) marks c): label values almost never hold one, and this
// check was the largest single cost of writing a page.
bool needs_escaping(std::string_view value) {
  constexpr std::uint64_t kOnes = 0x0101010101010101;
  constexpr std::uint64_t kHighs = 0x8080808080808080;
  auto has_zero_byte = [](std::uint64_t v) { return ((v - kOnes) & ~v & kHighs) != 0; };
  std::size_t i = 0;
  for (; i + 8 <= value.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, value.data() + i, 8);
    if (has_zero_byte(word ^ (kOnes * '\\')) || has_zero_byte(word ^ (kOnes * '"')) ||
        has_zero_byte(word ^ (kOnes * '\n'))) {
      return true;
    }
  }
  for (; i < value.size(); ++i) {
    if (value[i] == '\\' || value[i] == '"' || value[i] == '\n') return true;
  }
  return false;
}

}  // namespace

// Label values rarely hold anything to escape: the runs between escapes go in whole.
void append_escaped(std::string& out, std::string_view value) {
  if (!needs_escaping(value)) {
    out.append(value);
    return;
  }
  std::size_t run = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if (c != '\\' && c != '"' && c != '\n') continue;
    out.append(value.data() + run, i - run);
    out += '\\';
    out += c == '\n' ? 'n' : c;
    run = i + 1;
  }
  out.append(value.data() + run, value.size() - run);
}

std::string_view type_name(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return "counter";
    case prometheus::MetricType::Gauge:
      return "gauge";
    case prometheus::MetricType::Summary:
      return "summary";
    case prometheus::MetricType::Untyped:
      return "untyped";
    case prometheus::MetricType::Histogram:
      return "histogram";
  }
  return "untyped";
}

void append_family_head(std::string& out, std::string_view name, std::string_view help,
                        prometheus::MetricType type) {
  if (!help.empty()) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += '\n';
  }
  out += "# TYPE ";
  out += name;
  out += ' ';
  out += type_name(type);
  out += '\n';
}

}  // namespace ibprobe::collectors::exposition

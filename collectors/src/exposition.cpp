#include "ibprobe/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ibprobe/enum_names.h"

namespace ibprobe::collectors::exposition {

// prometheus-cpp 1.0 prints values with the stream precision max_digits10 - 1 in the default
// float field, which is printf's %.16g; NaN and the infinities are spelled its way.
char* write_value(char* out, double value) {
  char* const end = out + kMaxValueSize;
  // Counters are whole numbers: below 10^16 %.16g writes them as plain integers, which
  // to_chars writes several times faster for an integer than for a double.
  if (value >= 0 && value < 1e16 && !std::signbit(value)) {
    const auto whole = static_cast<std::uint64_t>(value);
    if (static_cast<double>(whole) == value) return std::to_chars(out, end, whole).ptr;
  }
  if (std::isnan(value)) return write_text(out, "Nan");
  if (std::isinf(value)) return write_text(out, value < 0 ? "-Inf" : "+Inf");
  return std::to_chars(out, end, value, std::chars_format::general,
                       std::numeric_limits<double>::max_digits10 - 1)
      .ptr;
}

void append_value(std::string& out, double value) {
  char buffer[kMaxValueSize];
  out.append(buffer, static_cast<std::size_t>(write_value(buffer, value) - buffer));
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

constexpr EnumNames<prometheus::MetricType, 5> kMetricTypeNames{
    {{prometheus::MetricType::Counter, "counter"},
     {prometheus::MetricType::Gauge, "gauge"},
     {prometheus::MetricType::Summary, "summary"},
     {prometheus::MetricType::Untyped, "untyped"},
     {prometheus::MetricType::Histogram, "histogram"}}};

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
  return name_of(kMetricTypeNames, type, "untyped");
}

std::size_t family_head_size(std::string_view name, std::string_view help) {
  constexpr std::size_t kLongestType = std::string_view("histogram").size();
  return std::string_view("# HELP  \n# TYPE  \n").size() + 2 * name.size() + help.size() +
         kLongestType;
}

char* write_family_head(char* out, std::string_view name, std::string_view help,
                        prometheus::MetricType type) {
  auto put = [&out](std::string_view text) { out = write_text(out, text); };
  if (!help.empty()) {
    put("# HELP ");
    put(name);
    put(" ");
    put(help);
    put("\n");
  }
  put("# TYPE ");
  put(name);
  put(" ");
  put(type_name(type));
  put("\n");
  return out;
}

void append_family_head(std::string& out, std::string_view name, std::string_view help,
                        prometheus::MetricType type) {
  const auto start = out.size();
  out.resize(start + family_head_size(name, help));
  char* const end = write_family_head(out.data() + start, name, help, type);
  out.resize(static_cast<std::size_t>(end - out.data()));
}

}  // namespace ibprobe::collectors::exposition

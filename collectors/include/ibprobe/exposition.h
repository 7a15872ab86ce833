// The pieces of the Prometheus text exposition format (0.0.4) as prometheus-cpp's TextSerializer
// writes them: shared by the metric set's own writer and the exporter's writer of families.
#pragma once

#include <prometheus/metric_type.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace ibprobe::collectors::exposition {

// Copies `text` to `out`, which has room for it; returns the end. Inline: a page is written in
// thousands of short pieces.
inline char* write_text(char* out, std::string_view text) {
  std::memcpy(out, text.data(), text.size());
  return out + text.size();
}

// A sample value: printf's %.16g, NaN and the infinities spelled prometheus-cpp's way.
void append_value(std::string& out, double value);
// The same written at `out`, which has room for kMaxValueSize characters; returns the end.
inline constexpr std::size_t kMaxValueSize = 32;
char* write_value(char* out, double value);

// A label value with backslash, double quote and newline escaped.
void append_escaped(std::string& out, std::string_view value);

// "counter", "gauge", ... as the TYPE line names it.
std::string_view type_name(prometheus::MetricType type);

// A family's "# HELP" line (none when `help` is empty) and its "# TYPE" line.
void append_family_head(std::string& out, std::string_view name, std::string_view help,
                        prometheus::MetricType type);
// Characters append_family_head() writes at most, and the same written at `out`.
std::size_t family_head_size(std::string_view name, std::string_view help);
char* write_family_head(char* out, std::string_view name, std::string_view help,
                        prometheus::MetricType type);

}  // namespace ibprobe::collectors::exposition

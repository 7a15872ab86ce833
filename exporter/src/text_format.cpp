#include "text_format.h"

#include <prometheus/text_serializer.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

namespace ibprobe::exporter {
namespace {

// One pass, copying the runs between characters to escape (label values rarely have any).
void append_escaped(std::string& out, const std::string& text, bool quote) {
  std::size_t run = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '\\' && c != '\n' && !(quote && c == '"')) continue;
    out.append(text, run, i - run);
    out += c == '\n' ? "\\n" : c == '\\' ? "\\\\" : "\\\"";
    run = i + 1;
  }
  out.append(text, run, std::string::npos);
}

// As TextSerializer writes a double: an ostream in the classic locale with precision
// max_digits10 - 1, i.e. printf's %.16g.
void append_value(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "Nan";
  } else if (std::isinf(value)) {
    out += value < 0 ? "-Inf" : "+Inf";
  } else {
    char buffer[32];
    const auto [end, ec] =
        std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general,
                      std::numeric_limits<double>::max_digits10 - 1);
    out.append(buffer, end);
  }
}

std::string_view type_name(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return "counter";
    case prometheus::MetricType::Gauge:
      return "gauge";
    default:
      return "untyped";
  }
}

double value_of(const prometheus::MetricFamily& family, const prometheus::ClientMetric& metric) {
  switch (family.type) {
    case prometheus::MetricType::Counter:
      return metric.counter.value;
    case prometheus::MetricType::Gauge:
      return metric.gauge.value;
    default:
      return metric.untyped.value;
  }
}

}  // namespace

std::string serialize_text(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  std::size_t samples = 0;
  for (const auto& family : families) samples += family.metric.size();
  out.reserve(samples * 160);  // a switch-port sample with its six labels is about that long
  for (const auto& family : families) {
    if (family.type != prometheus::MetricType::Counter &&
        family.type != prometheus::MetricType::Gauge &&
        family.type != prometheus::MetricType::Untyped) {
      // Histograms and summaries (none of ours today) take prometheus-cpp's own path.
      std::ostringstream other;
      prometheus::TextSerializer().Serialize(other, {family});
      out += std::move(other).str();
      continue;
    }
    if (!family.help.empty()) {
      out += "# HELP ";
      out += family.name;
      out += ' ';
      append_escaped(out, family.help, false);
      out += '\n';
    }
    out += "# TYPE ";
    out += family.name;
    out += ' ';
    out += type_name(family.type);
    out += '\n';
    for (const auto& metric : family.metric) {
      out += family.name;
      if (!metric.label.empty()) {
        out += '{';
        for (std::size_t i = 0; i < metric.label.size(); ++i) {
          if (i) out += ',';
          out += metric.label[i].name;
          out += "=\"";
          append_escaped(out, metric.label[i].value, true);
          out += '"';
        }
        out += '}';
      }
      out += ' ';
      append_value(out, value_of(family, metric));
      if (metric.timestamp_ms != 0) {
        out += ' ';
        out += std::to_string(metric.timestamp_ms);
      }
      out += '\n';
    }
  }
  return out;
}

}  // namespace ibprobe::exporter

// The Prometheus text exposition format, written straight into one string: the same bytes as
// prometheus-cpp's TextSerializer for counters, gauges and untyped series (but HELP escaped as
// the format says), without an ostream insertion per field, which dominated large pages (every
// switch port of a fabric).
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

namespace ibprobe::exporter {

std::string serialize_text(const std::vector<prometheus::MetricFamily>& families);

}  // namespace ibprobe::exporter

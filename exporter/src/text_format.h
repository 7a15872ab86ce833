// The Prometheus text exposition format (0.0.4), written into one buffer: what prometheus-cpp's
// TextSerializer writes, byte for byte, at a fraction of its cost (no ostream, no locale, one
// allocation that grows a few times per scrape).
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

namespace ibprobe::exporter {

// Appends `families` to `out`.
void append_text_format(std::string& out, const std::vector<prometheus::MetricFamily>& families);

std::string text_format(const std::vector<prometheus::MetricFamily>& families);

}  // namespace ibprobe::exporter

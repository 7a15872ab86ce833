// Times and figures as the texts a person reads print them: the recent-runs page and the
// verdicts sent to Alertmanager.
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace ibprobe::exporter {

// `t` in UTC, by a strftime format.
inline std::string utc_text(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  return std::string(text, std::strftime(text, sizeof(text), format, &utc));
}

// `value` with `decimals` digits after the point.
inline std::string fixed_point(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

}  // namespace ibprobe::exporter
